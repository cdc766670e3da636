// 16-bit floats on the host (CUDA-free): the conversions of CUDA's __float2half_rn /
// __half2float / __float2bfloat16_rn / __bfloat162float, bit for bit, and the host casts of the
// fp16/bf16 compression hooks (the CPU backend; the oracle of the GPU kernels' tests).
// Tested against _Float16 and a double-precision bf16 rounding (tests/cpu/test_half_casts.cpp)
// and bit for bit against CUDA's host conversions (tests/cpu/test_half_casts_gpu.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "model/dtype.h"

namespace vitddp {

/// IEEE binary16 bits of `x`, round to nearest even (overflow -> inf, NaN -> 0x7fff), as CUDA's
/// __float2half_rn.
uint16_t float_to_fp16(float x);
/// The float value of binary16 bits (exact; NaN -> the quiet NaN 0x7fffffff, as __half2float).
float fp16_to_float(uint16_t h);
/// bfloat16 bits of `x`, round to nearest even (NaN -> 0x7fff), as CUDA's __float2bfloat16_rn.
uint16_t float_to_bf16(float x);
/// The float value of bfloat16 bits (exact).
float bf16_to_float(uint16_t h);

/// The compression step of fp16_compress_hook / bf16_compress_hook on the host:
/// out[i] = t(x[i] / world_size), the division done in fp32 *before* the single rounding to
/// 16 bits (so two ranks holding 40000 send 20000 each and fp16 does not overflow; PyTorch casts
/// first and divides in 16 bits, which only differs where the cast overflows or rounds twice).
/// `t` must be F16 or BF16 (else std::invalid_argument).
void cast_to_16bit_host(DType t, const float* x, size_t n, int world_size, uint16_t* out);
/// The decompression step: x[i] = float(h[i]). `t` must be F16 or BF16.
void cast_from_16bit_host(DType t, const uint16_t* h, size_t n, float* x);

}  // namespace vitddp
