// Synthetic training batches, defined once for the host (src/data/data.h SyntheticSource) and the GPU
// (DeviceSyntheticSource, cuda/kernels/synthetic_data.h): every value is a pure function of (seed, rank,
// step, index) through the counter-based hash of model/rng.h, so both produce the same batch (up
// to the last bits of float logf/sinf/cosf, which differ between glibc and CUDA by at most 2 ulp).
// Host and device inline functions (VITDDP_HD); no CUDA header.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "model/rng.h"

namespace vitddp {

/// RNG stream of one batch's images (field 0) or labels (field 1):
/// rank in bits 48..63, step in bits 1..47, field in bit 0. Requires 0 <= rank < 2^16 and
/// 0 <= step < 2^47 (distinct (rank, step, field) then give distinct streams).
VITDDP_HD inline uint64_t synthetic_stream(int rank, int64_t step, int field) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(rank) & 0xFFFFu) << 48) |
         ((static_cast<uint64_t>(step) & ((uint64_t{1} << 47) - 1)) << 1) | static_cast<uint64_t>(field & 1);
}

/// Standard normal values 2*pair and 2*pair+1 of a batch's image tensor (flat NCHW index), by
/// Box-Muller on two 24-bit uniforms taken from one 64-bit draw rand_bits(seed, image stream,
/// pair): z0 = r cos(2 pi u2), z1 = r sin(2 pi u2), r = sqrt(-2 ln u1), float32 arithmetic.
/// |z| <= 5.9 (u1 >= 2^-25).
VITDDP_HD inline void synthetic_normal_pair(uint64_t seed, int rank, int64_t step, uint64_t pair, float* z0,
                                            float* z1) {
  const uint64_t bits = rand_bits(seed, synthetic_stream(rank, step, 0), pair);
  const float u1 = (static_cast<float>(bits >> 40) + 0.5f) * (1.0f / 16777216.0f);
  const float u2 = (static_cast<float>(bits & 0xFFFFFFu) + 0.5f) * (1.0f / 16777216.0f);
#if defined(__CUDA_ARCH__)
  const float r = ::sqrtf(-2.0f * ::logf(u1));
  const float a = 6.2831853071795865f * u2;
  *z0 = r * ::cosf(a);
  *z1 = r * ::sinf(a);
#else
  const float r = std::sqrt(-2.0f * std::log(u1));
  const float a = 6.2831853071795865f * u2;
  *z0 = r * std::cos(a);
  *z1 = r * std::sin(a);
#endif
}

/// Image value `index` (flat NCHW index in the batch tensor [batch, channels, height, width],
/// i.e. sample * image_elems + element) of the synthetic batch of (seed, rank, step).
VITDDP_HD inline float synthetic_pixel(uint64_t seed, int rank, int64_t step, uint64_t index) {
  float z0, z1;
  synthetic_normal_pair(seed, rank, step, index >> 1, &z0, &z1);
  return (index & 1) ? z1 : z0;
}

/// Label of sample `n` of the synthetic batch of (seed, rank, step): uniform in
/// [0, num_classes) (rand_bits(seed, label stream, n) % num_classes; bias < 1e-15).
VITDDP_HD inline int32_t synthetic_label(uint64_t seed, int rank, int64_t step, int64_t n, int num_classes) {
  return static_cast<int32_t>(rand_bits(seed, synthetic_stream(rank, step, 1), static_cast<uint64_t>(n)) %
                              static_cast<uint64_t>(num_classes));
}

}  // namespace vitddp
