// Deterministic column sums (bias gradients), fp32 accumulation, on a stream.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace vitddp {

/// Floats of scratch column_sum needs for a [rows, cols] input.
size_t column_sum_scratch_floats(int rows, int cols);

/// out[c] = sum_{r < rows} x[r*ld + c] for c < cols (accumulate=false), or out[c] += that sum
/// (accumulate=true). x: [rows, cols] fp32 with leading dimension ld >= cols. Two deterministic
/// stages: per row-chunk partials into `scratch` (column_sum_scratch_floats), then a fixed-order
/// sum per column. out must not alias x or scratch.
/// The bf16 overload reads bf16 x (widened to fp32); the sums and out are fp32.
void column_sum(const float* x, int rows, int cols, int ld, float* out, bool accumulate,
                float* scratch, cudaStream_t stream);
void column_sum(const __nv_bfloat16* x, int rows, int cols, int ld, float* out, bool accumulate,
                float* scratch, cudaStream_t stream);

/// The second stage of column_sum on its own, for kernels that write their own per-chunk partials:
/// out[c] (+)= sum_{k < nchunks} partial[k*cols + c], in a fixed order (deterministic).
/// partial: [nchunks, cols] fp32; out: [cols] fp32, not aliasing partial.
void column_sum_partials(const float* partial, int nchunks, int cols, float* out, bool accumulate,
                         cudaStream_t stream);

}  // namespace vitddp
