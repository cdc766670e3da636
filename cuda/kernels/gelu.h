// Exact (erf) GELU, torch.nn.GELU(approximate='none'), elementwise in fp32 arithmetic on fp32 or
// bf16 storage, on a stream. (cuBLASLt's GELU epilogue is the tanh approximation, so it is not
// used: the model keeps torchvision's exact GELU.)
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace vitddp {

/// y[i] = 0.5 * u[i] * (1 + erf(u[i] / sqrt(2))) for i < n. u and y: n floats (may alias).
void gelu_forward(const float* u, float* y, size_t n, cudaStream_t stream);

/// du[i] = dy[i] * GELU'(u[i]), GELU'(u) = Phi(u) + u * phi(u) (standard normal cdf / pdf), for
/// i < n. du may alias dy (in place).
void gelu_backward(const float* dy, const float* u, float* du, size_t n, cudaStream_t stream);

/// bf16 storage (what autocast does for nn.GELU on a bf16 tensor): each value is widened to fp32,
/// transformed in fp32 and rounded once to bf16. Same aliasing rules as the fp32 versions.
/// Vectorised (8 values per access) when n and the pointers allow it. The bf16 backward (here and
/// in gelu_backward_bias) takes Phi from erf by Abramowitz and Stegun's formula 7.1.26 (absolute
/// error <= 1.5e-7, its polynomial times the density's own exponential, so the error shrinks with
/// Phi in the left tail) instead of erff: du is the exact derivative's bf16 rounding or a
/// neighbour of it (tests/gpu/test_gelu.cpp checks every bf16 input with |u| <= 16). The forward
/// keeps erff.
void gelu_forward(const __nv_bfloat16* u, __nv_bfloat16* y, size_t n, cudaStream_t stream);
void gelu_backward(const __nv_bfloat16* dy, const __nv_bfloat16* u, __nv_bfloat16* du, size_t n,
                   cudaStream_t stream);

/// Floats of scratch gelu_backward_bias needs for a [rows, cols] input of bf16 (bf16_storage) or
/// fp32 storage.
size_t gelu_backward_bias_scratch_floats(int rows, int cols, bool bf16_storage);

/// gelu_backward on a contiguous row-major [rows, cols] matrix (du may alias dy), fused with the
/// bias gradient of the nn.Linear whose output u is (ViT's fc1): db[c] = sum_r du[r, c]
/// (accumulate=false) or db[c] += that sum, over the stored du (bf16: the rounded values, what
/// column_sum of du and cuBLASLt's BGRADB epilogue read). Each block sums 8 rows (bf16) or 16
/// (fp32) of 512 columns (8 contiguous per thread, 16-byte accesses) into `scratch`, then column_sum_partials
/// (reduce.h) adds the partials in a fixed order: deterministic, no atomics. Shapes with cols not
/// a multiple of 8 or unaligned pointers take gelu_backward + column_sum (same values).
/// scratch: gelu_backward_bias_scratch_floats(rows, cols, storage is bf16) fp32. db: [cols] fp32.
/// y: null, or [rows, cols] (not aliasing dy, u or du) that also receives GELU(u), the values
/// gelu_forward writes, bit for bit: the activation recomputed from u in the pass that reads u
/// anyway (GpuViTOptions::recompute_gelu), for one extra write instead of keeping y from forward
/// (a y that is not 16-byte aligned is written by gelu_forward first; du and db are the same bits
/// as without y either way).
/// Throws std::invalid_argument for negative rows or cols.
void gelu_backward_bias(const float* dy, const float* u, float* du, int rows, int cols, float* db,
                        bool accumulate, float* scratch, cudaStream_t stream, float* y = nullptr);
void gelu_backward_bias(const __nv_bfloat16* dy, const __nv_bfloat16* u, __nv_bfloat16* du, int rows,
                        int cols, float* db, bool accumulate, float* scratch, cudaStream_t stream,
                        __nv_bfloat16* y = nullptr);

}  // namespace vitddp
