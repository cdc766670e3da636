#include "mpi/hooks/half_host.h"

#include <cstring>

namespace vitddp {

namespace {

uint32_t bits_of(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, 4);
  return u;
}

float float_of(uint32_t u) {
  float x = 0;
  std::memcpy(&x, &u, 4);
  return x;
}

// Round to nearest even from the bits dropped: `remainder` holds them left-aligned in 32 bits.
uint16_t round_even(uint32_t result, uint32_t remainder) {
  if (remainder > 0x80000000u || (remainder == 0x80000000u && (result & 1u))) ++result;
  return static_cast<uint16_t>(result);
}

}  // namespace

// The integer algorithm of CUDA's host __float2half_rn (cuda_fp16.hpp, __internal_float2half).
uint16_t float_to_fp16(float x) {
  const uint32_t bits = bits_of(x);
  uint32_t u = bits & 0x7fffffffu;
  const uint32_t sign = (bits >> 16) & 0x8000u;
  if (u >= 0x7f800000u) return u == 0x7f800000u ? static_cast<uint16_t>(sign | 0x7c00u) : 0x7fffu;  // inf, NaN
  if (u > 0x477fefffu) return round_even(sign | 0x7bffu, 0x80000000u);                             // overflow
  if (u >= 0x38800000u) {                                                                           // normal
    const uint32_t remainder = u << 19;
    u -= 0x38000000u;
    return round_even(sign | (u >> 13), remainder);
  }
  if (u < 0x33000001u) return round_even(sign, u);  // +-0 (the remainder never rounds up)
  const uint32_t exponent = u >> 23;                // subnormal
  const uint32_t shift = 0x7eu - exponent;
  const uint32_t mantissa = (u & 0x7fffffu) | 0x800000u;
  return round_even((sign | (mantissa >> shift)) & 0xffffu, mantissa << (32 - shift));
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = static_cast<uint32_t>(h & 0x3ffu) << 13;
  if (exponent == 0x1fu) {  // inf, NaN
    if (mantissa != 0) return float_of(0x7fffffffu);
    return float_of(sign | 0x7f800000u);
  }
  if (exponent == 0) {  // zero and subnormals: mantissa x 2^-24, exact in fp32
    const float v = static_cast<float>(h & 0x3ffu) * 5.9604644775390625e-8f;
    return float_of(sign | bits_of(v));
  }
  return float_of(sign | ((exponent + 0x70u) << 23) | mantissa);
}

// The algorithm of CUDA's host __float2bfloat16_rn (cuda_bf16.hpp, __internal_float2bfloat16).
uint16_t float_to_bf16(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // NaN
  return round_even(u >> 16, u << 16);
}

float bf16_to_float(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

void cast_to_16bit_host(DType t, const float* x, size_t n, int world_size, uint16_t* out) {
  require_16bit(t, "cast_to_16bit_host");
  const float ws = static_cast<float>(world_size);
  if (t == DType::F16) {
    for (size_t i = 0; i < n; ++i) out[i] = float_to_fp16(x[i] / ws);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(x[i] / ws);
  }
}

void cast_from_16bit_host(DType t, const uint16_t* h, size_t n, float* x) {
  require_16bit(t, "cast_from_16bit_host");
  if (t == DType::F16) {
    for (size_t i = 0; i < n; ++i) x[i] = fp16_to_float(h[i]);
  } else {
    for (size_t i = 0; i < n; ++i) x[i] = bf16_to_float(h[i]);
  }
}

}  // namespace vitddp
