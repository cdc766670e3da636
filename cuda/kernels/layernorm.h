// LayerNorm over the last dimension (torch.nn.LayerNorm, biased variance), fp32 statistics, on a
// stream; outputs and incoming gradients in fp32 or bf16.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace vitddp {

/// Forward: for each of `rows` rows of width D,
///   mean = sum(x)/D, var = sum((x-mean)^2)/D, rstd = 1/sqrt(var+eps),
///   y = (x-mean)*rstd*gamma + beta.
/// x: [rows, D] with leading dimension ldx (>= D); y: [rows, D] with ldy; gamma, beta: [D];
/// mean, rstd: [rows] (saved for the backward). Two-pass statistics in fp32. D <= 4096.
/// The bf16 overload computes the same in fp32 and rounds y to bf16 (what autocast's fp32
/// LayerNorm followed by the next Linear's cast to bf16 gives).
void layernorm_forward(const float* x, int ldx, const float* gamma, const float* beta, float* y,
                       int ldy, float* mean, float* rstd, int rows, int D, float eps,
                       cudaStream_t stream);
void layernorm_forward(const float* x, int ldx, const float* gamma, const float* beta,
                       __nv_bfloat16* y, int ldy, float* mean, float* rstd, int rows, int D,
                       float eps, cudaStream_t stream);

/// Floats of scratch that layernorm_backward needs for any row count up to `rows` (width D): the
/// per-block parameter-gradient partials, or column_sum's for the dx_colsum fallback. A buffer
/// sized for the largest batch therefore serves every smaller one.
size_t layernorm_backward_scratch_floats(int rows, int D);

/// Backward of layernorm_forward given dy = dL/dy ([rows, D], leading dimension lddy):
///   xhat = (x-mean)*rstd, g = gamma*dy,
///   dx = rstd*(g - mean(g) - xhat*mean(g*xhat)),
/// written to dx ([rows, D], leading dimension lddx) when add_dx is false, or added to it (the
/// residual-stream gradient) when add_dx is true. dx must not alias dy or x.
/// dgamma[D] = sum_rows dy*xhat and dbeta[D] = sum_rows dy are written (accumulate=false) or
/// added (accumulate=true); the row sums are done in two deterministic stages (per-block partials
/// in `scratch`, then a fixed-order sum), no atomics. scratch: layernorm_backward_scratch_floats.
/// dx_bf16: nullptr, or a second output [rows, D] (leading dimension lddx) that receives
/// bf16(dx) - the final value, after the add - for the bf16 GEMMs that consume the residual-stream
/// gradient. The bf16-dy overload widens dy to fp32; all arithmetic is fp32.
/// dx_colsum: nullptr, or [D] fp32 that receives sum_rows dx (the final fp32 value, after the add),
/// written or added as `accumulate` says: the bias gradient of the nn.Linear whose output gradient
/// dx is (ViT's fc2 and out_proj, whose outputs are added to the residual stream), saving that
/// Linear's column sum over dx. Computed with the partials above when the vector kernel runs
/// (D, leading dimensions and pointers aligned to 4 elements), else by column_sum (reduce.h).
/// The sums use fp32 dx even where the GEMMs read its bf16 copy (PyTorch autocast sums the bf16
/// gradient; the difference is that rounding, within the bf16 tolerance).
void layernorm_backward(const float* dy, int lddy, const float* x, int ldx, const float* mean,
                        const float* rstd, const float* gamma, float* dx, int lddx, bool add_dx,
                        float* dgamma, float* dbeta, bool accumulate, int rows, int D,
                        float* scratch, cudaStream_t stream, __nv_bfloat16* dx_bf16 = nullptr,
                        float* dx_colsum = nullptr);
void layernorm_backward(const __nv_bfloat16* dy, int lddy, const float* x, int ldx,
                        const float* mean, const float* rstd, const float* gamma, float* dx,
                        int lddx, bool add_dx, float* dgamma, float* dbeta, bool accumulate,
                        int rows, int D, float* scratch, cudaStream_t stream,
                        __nv_bfloat16* dx_bf16 = nullptr, float* dx_colsum = nullptr);

}  // namespace vitddp
