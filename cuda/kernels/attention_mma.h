// Tensor-core attention core for short sequences (the /32 ViTs: T = 50, head_dim = 64) in bf16,
// and on TF32 tensor cores for fp32 activations in --precision tf32: one thread block per
// (batch, head), Q K^T, P V and the four products of the backward as warp mma.sync (m16n8k16
// with bf16 operands, m16n8k8 with tf32 operands; fp32 accumulation) on tiles padded to 64 x 64
// in shared memory. Called by attention_forward / attention_backward (cuda/kernels/attention.h) for
// every shape attention_saves_stats() names (they refuse the call when attention_mma_fits() does
// not hold); same layouts and formulas, but the forward saves each row's softmax statistics, not
// the probabilities. The fp32 operands P and dS keep about 16 bits (hi + lo bf16, relative error
// about 2^-17), far below the bf16 rounding of the results.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "model/kernel_choice.h"  // attention_mma_shape

namespace vitddp {

/// True when the tensor-core kernels take this shape and these pointers: 1 <= T <= 64,
/// head_dim == 64, every pointer 16-byte aligned (rows are moved 16 bytes at a time; the row
/// strides 3 x heads x 64 and heads x 64 bf16 are multiples of 16 bytes).
bool attention_mma_fits(int T, int head_dim, const void* qkv, const void* out_or_dout, const void* dqkv);

/// Floats of the forward's saved softmax for these kernels: each row's (max, 1 / sum), [batch,
/// heads, T, 2] fp32, in place of attention.h's [batch, heads, T, T] probabilities.
inline size_t attention_mma_stats_floats(int batch, int T, int heads) { return (size_t)batch * heads * T * 2; }

/// Forward for one layer. qkv: [batch*T, 3*heads*64] bf16 (cuda/kernels/attention.h's packed layout);
/// stats: [batch, heads, T, 2] fp32, written: each query row's max of S = q k^T / 8 and 1 / sum_k
/// exp(S - max) (fp32 from exact bf16 products); out: [batch*T, heads*64] bf16, written (P V with
/// P = exp(S - max) / sum split into two bf16 terms, hi + lo, so P enters the product with about
/// 16 bits instead of bf16's 8, where FlashAttention rounds P to bf16 once). Preconditions:
/// attention_mma_fits (qkv and out 16-byte aligned), stats 8-byte aligned, 1 <= batch, heads <=
/// 65535. Enqueues on `stream` (the backward first sets its kernel's shared-memory attribute, host
/// work); std::runtime_error on a launch error.
void attention_forward_mma(const __nv_bfloat16* qkv, float* stats, __nv_bfloat16* out, int batch, int T, int heads,
                           cudaStream_t stream);

/// Backward (cuda/kernels/attention.h's formulas) from the forward's stats: P is recomputed from
/// Q, K and each row's (max, 1 / sum) with the forward's fragments, products and operations in
/// the same order, so it is the forward's P bit for bit (as FlashAttention's backward recomputes
/// P from the log-sum-exp, Dao 2022, Algorithm 4). dqkv [batch*T, 3*heads*64] bf16, written. The
/// operands that are not bf16 inputs (P and dS) enter the products as hi + lo bf16 pairs, as in
/// the forward. Deterministic (no atomics). Preconditions and errors as the forward's.
/// dqkv_colsum (optional, 4-byte aligned): [batch, 3*heads*64] fp32, written: row b holds the
/// column sums over batch item b's T rows of dqkv as stored (the bf16 values, summed in fp32 in a
/// fixed order), so column_sum_partials (cuda/kernels/reduce.h) over its `batch` rows gives in_proj's
/// bias gradient (nn.MultiheadAttention's in_proj_bias: the column sums of dqkv) without a pass of
/// its own over dqkv. dqkv is the same bit for bit with and without it.
void attention_backward_mma(const __nv_bfloat16* qkv, const float* stats, const __nv_bfloat16* dout,
                            __nv_bfloat16* dqkv, int batch, int T, int heads, cudaStream_t stream,
                            float* dqkv_colsum = nullptr);

/// The same kernels on TF32 tensor cores for fp32 activations (--precision tf32): qkv, out,
/// dout and dqkv fp32 (the layouts above), Q, K, V and dO rounded to tf32 (cvt.rna, as a TF32
/// GEMM does), fp32 accumulation, P and dS as tf32 hi + lo pairs (about 21 bits), stats as
/// above. Preconditions and errors as the bf16 functions'.
void attention_forward_mma_tf32(const float* qkv, float* stats, float* out, int batch, int T, int heads,
                                cudaStream_t stream);
void attention_backward_mma_tf32(const float* qkv, const float* stats, const float* dout, float* dqkv, int batch, int T,
                                 int heads, cudaStream_t stream, float* dqkv_colsum = nullptr);

}  // namespace vitddp
