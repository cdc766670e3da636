// The comm hooks' 16-bit casts of cuda/kernels/compression.h (cast_to_16bit, cast_from_16bit) bit
// for bit against their host twins in mpi/hooks/half_host.h (cast_to_16bit_host,
// cast_from_16bit_host: the CPU backend's fp16 / bf16 hooks), in both types, on the 4-wide and the
// scalar (unaligned) paths.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "cuda/kernels/compression.h"
#include "mpi/hooks/half_host.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;

TEST_CASE("compression: 16-bit casts on the GPU equal the host casts bit for bit", "[gpu][compression]") {
  REQUIRE_GPU();
  Stream st;
  const size_t n = 100003;
  std::vector<float> h = normal_vec(n, 21, 0, 50.0);
  h[0] = 70000.0f;   // above fp16's largest finite value (65504): +Inf in fp16, finite in bf16
  h[1] = 1e-8f;      // below fp16's smallest subnormal before the division
  h[2] = -0.0f;
  h[3] = INFINITY;
  DevVec<float> x(h), back(n);
  DevVec<uint16_t> y(n);
  for (DType t : {DType::F16, DType::BF16}) {
    for (size_t shift : {size_t(0), size_t(1)}) {  // 0: 16-byte aligned (float4 path); 1: scalar path
      INFO(dtype_name(t) << " shift " << shift);
      const size_t m = n - shift;
      cast_to_16bit(x.get() + shift, m, 2.0f, t, y.get(), st.s);
      cast_from_16bit(y.get(), m, t, back.get() + shift, st.s);
      const auto got16 = y.download();
      const auto got = back.download();
      std::vector<uint16_t> want16(m);
      std::vector<float> want(m);
      cast_to_16bit_host(t, h.data() + shift, m, 2, want16.data());
      cast_from_16bit_host(t, want16.data(), m, want.data());
      size_t bad16 = 0, bad = 0;
      for (size_t i = 0; i < m; ++i) {
        bad16 += got16[i] != want16[i];
        bad += std::memcmp(&got[i + shift], &want[i], sizeof(float)) != 0;
      }
      CHECK(bad16 == 0);
      CHECK(bad == 0);
    }
  }
  CHECK_THROWS_AS(cast_to_16bit(x.get(), n, 1.0f, DType::F32, y.get(), st.s), std::invalid_argument);
  CHECK_THROWS_AS(cast_from_16bit(y.get(), n, DType::F32, x.get(), st.s), std::invalid_argument);
}
