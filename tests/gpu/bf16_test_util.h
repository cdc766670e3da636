// Host bf16 helpers of the GPU kernel tests (tests/gpu/test_*.cpp): fp32 -> bf16 round to
// nearest even by bit arithmetic (independent of the CUDA headers' conversions, so it can be their
// oracle), and host vectors to and from __nv_bfloat16 for DevVec.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace vitddp_test {

/// Host round-to-nearest-even of fp32 to bf16 (bit arithmetic, independent of the CUDA headers);
/// NaN is kept quiet.
inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)((u + rounding) >> 16);
}

/// The float value of bf16 bits `b` (exact).
inline float bf16_value(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// f rounded to the nearest bf16 (ties to even), as a float.
inline float round_bf16(float f) { return bf16_value(bf16_bits(f)); }

/// Each value of v rounded to bf16 (bf16_bits), for upload to a DevVec<__nv_bfloat16>.
inline std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t b = bf16_bits(v[i]);
    std::memcpy(&out[i], &b, 2);
  }
  return out;
}

/// The float values of bf16 elements (a DevVec<__nv_bfloat16>'s download), exact.
inline std::vector<float> to_float(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t b;
    std::memcpy(&b, &v[i], 2);
    out[i] = bf16_value(b);
  }
  return out;
}

/// The values of v after rounding each to bf16 (the inputs the GPU sees).
inline std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = round_bf16(v[i]);
  return out;
}

}  // namespace vitddp_test
