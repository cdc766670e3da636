// The fp32 -> bf16 conversion of cuda/kernels/cast.h (convert_to_bf16) bit for bit against
// bf16_bits of tests/gpu/bf16_test_util.h (round to nearest even by bit arithmetic). Host
// counterpart, not used here: float_to_bf16 of mpi/hooks/half_host.h (the comm hooks' cast).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/kernels/cast.h"
#include "tests/catch.h"
#include "tests/gpu/bf16_test_util.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;
using bf16 = __nv_bfloat16;

TEST_CASE("cast: convert_to_bf16 rounds to nearest even like the host", "[gpu][cast]") {
  REQUIRE_GPU();
  Stream st;
  for (size_t n : {size_t(1), size_t(7), size_t(1000003)}) {
    INFO("n=" << n);
    std::vector<float> h = normal_vec(n, 11, 0, 3.0);
    if (n > 8) {  // ties, tiny, huge and special values
      h[0] = 1.00390625f;          // exactly half-way between two bf16: rounds to even (1.0)
      h[1] = 1.01171875f;          // half-way, rounds up to even
      h[2] = 3.4e38f;              // above the largest bf16 (3.39e38): rounds to +Inf
      h[3] = -1e-40f;              // denormal
      h[4] = INFINITY;
      h[5] = 0.0f;
    }
    DevVec<float> x(h);
    DevVec<bf16> y(n);
    convert_to_bf16(x.get(), y.get(), n, st.s);
    const auto got = y.download();
    size_t mismatches = 0;
    for (size_t i = 0; i < n; ++i) {
      uint16_t g;
      std::memcpy(&g, &got[i], 2);
      mismatches += g != bf16_bits(h[i]);
    }
    CHECK(mismatches == 0);
    // Unaligned start (scalar path).
    if (n > 8) {
      convert_to_bf16(x.get() + 1, y.get() + 3, n - 8, st.s);
      const auto got2 = y.download();
      size_t bad = 0;
      for (size_t i = 0; i < n - 8; ++i) {
        uint16_t g;
        std::memcpy(&g, &got2[i + 3], 2);
        bad += g != bf16_bits(h[i + 1]);
      }
      CHECK(bad == 0);
    }
  }
}
