// fp32 -> bf16 conversion of a device array (the bf16 working copy of the weights), on a stream.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace vitddp {

/// y[i] = bf16(x[i]) for i < n, round to nearest even (NaN stays NaN, overflow to +-Inf as
/// __float2bfloat16_rn). x: n fp32, y: n bf16, device memory, must not overlap. Vectorised
/// (4 values per access) when both pointers are suitably aligned. Memory-bound: 6 bytes per
/// element (vit_l_32's 306.5 M parameters: about 1.8 GB, about 0.5 ms on an H200).
void convert_to_bf16(const float* x, __nv_bfloat16* y, size_t n, cudaStream_t stream);

}  // namespace vitddp
