// The host 16-bit casts of the comm hooks (mpi/hooks/half_host.h, written without CUDA headers) bit
// for bit against CUDA's own __float2half_rn / __half2float / __float2bfloat16_rn /
// __bfloat162float (host paths of cuda_fp16.h, cuda_bf16.h), which the GPU hooks' kernels match.
// Built in cpu_tests with the GPU backend only (it needs the toolkit's headers, not a GPU).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "mpi/hooks/half_host.h"
#include "tests/catch.h"

namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

uint16_t cuda_fp16(float x) { return static_cast<__half_raw>(__float2half_rn(x)).x; }
uint16_t cuda_bf16(float x) { return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x; }
float cuda_fp16_to_float(uint16_t h) {
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}
float cuda_bf16_to_float(uint16_t h) {
  __nv_bfloat16_raw r;
  r.x = h;
  return __bfloat162float(__nv_bfloat16(r));
}

}  // namespace

TEST_CASE("16-bit casts match CUDA's host conversions", "[hooks][casts]") {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t h16 = static_cast<uint16_t>(h);
    REQUIRE(bits_of(vitddp::fp16_to_float(h16)) == bits_of(cuda_fp16_to_float(h16)));
    REQUIRE(bits_of(vitddp::bf16_to_float(h16)) == bits_of(cuda_bf16_to_float(h16)));
  }
  // Every 97th float bit pattern (44 million: all exponents, signs and rounding cases), plus
  // the neighbourhood of each binary16 / bfloat16 rounding boundary.
  auto check = [](uint32_t u) {
    float x;
    std::memcpy(&x, &u, sizeof x);
    if (vitddp::float_to_fp16(x) != cuda_fp16(x) || vitddp::float_to_bf16(x) != cuda_bf16(x)) {
      INFO("float bits " << u);
      REQUIRE(vitddp::float_to_fp16(x) == cuda_fp16(x));
      REQUIRE(vitddp::float_to_bf16(x) == cuda_bf16(x));
    }
  };
  for (uint64_t u = 0; u <= 0xffffffffull; u += 97) check(static_cast<uint32_t>(u));
  for (uint32_t b = 0; b < 0x10000u; ++b)
    for (uint32_t d : {0x0fffu, 0x1000u, 0x1001u, 0x7fffu, 0x8000u, 0x8001u}) {
      check((b << 16) + d);       // bfloat16 ties and neighbours
      check((b << 13) + d % 0x2000u);  // binary16 normal-range ties
    }
}
