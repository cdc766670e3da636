// Multi-head self-attention core softmax(Q K^T / sqrt(dh)) V, forward and backward, fp32
// arithmetic on fp32 or bf16 activations.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "model/precision.h"

namespace vitddp {

/// Layout (torch.nn.MultiheadAttention with packed in_proj): qkv is [B*T, 3D] row-major, D = H*dh;
/// for batch b, token t, head h: q = qkv[b*T+t, h*dh : (h+1)*dh], k = the same columns + D,
/// v = the same columns + 2D. Output o is [B*T, D] with head h in columns h*dh..(h+1)*dh-1
/// (heads concatenated, ready for out_proj). probs, the softmax the forward saves for the backward
/// (attention_saved_floats floats): [B, H, T, T] probabilities, probs[b,h,i,j] = softmax_j (q_i .
/// k_j / sqrt(dh)); for the tensor-core kernels (attention_saves_stats) [B, H, T, 2] instead, each
/// query row's max of the scores and 1 / sum of their exponentials. Limits: 1 <= T <= 512,
/// 1 <= dh <= 128, 1 <= B, H <= 65535 (grid dimensions), and the shared memory of the larger shapes' kernels within the GPU's per-block
/// limit (H200, 227 KiB: T <= 416 at dh 64, 320 at dh 80, 192 at dh 128); other shapes throw
/// std::invalid_argument naming the shape, forward included when only backward's kernels would not
/// fit (a shape that cannot train).
/// Three implementations:
///  - bf16 (and fp32 storage under Precision::tf32) with T <= 64, dh == 64 (attention_saves_stats;
///    vit_l_32, vit_b_32): tensor-core kernels (cuda/kernels/attention_mma.h), one block per (batch, head), mma.sync
///    with bf16 (tf32) operands and fp32 accumulation; P and dS enter their products as hi + lo
///    pairs (about 16 bits in bf16, 21 in tf32); the backward recomputes P from Q, K and the saved
///    row statistics (bit for bit the forward's P).
///  - otherwise T <= 64 and dh <= 64: one block per (batch, head) with Q, K, V, P in shared memory
///    and 4x4 register tiles, fp32 arithmetic;
///  - larger shapes: one warp per query / key row over query or key tiles, fp32 arithmetic.
/// All accumulate in fp32 and use exact expf.
/// bf16 overloads: qkv, o, dout and dqkv are bf16 (autocast's scaled_dot_product_attention on
/// bf16 inputs); values are widened to fp32 (or kept as exact bf16 operands) on load, probs stay
/// fp32, results are rounded to bf16 once on store.

/// True when attention_forward / attention_backward take the tensor-core kernels, which save row
/// statistics instead of probabilities: 1 <= T <= 64, head_dim == 64 and `precision` bf16 (the bf16
/// overloads) or tf32. Their buffers must then be aligned (qkv, out, dout, dqkv 16 bytes, probs 8),
/// or the calls throw std::invalid_argument.
bool attention_saves_stats(int T, int head_dim, Precision precision);

/// Floats of the probs buffer for this shape and precision: batch * heads * T * 2 where
/// attention_saves_stats, else batch * heads * T * T.
size_t attention_saved_floats(int batch, int T, int heads, int head_dim, Precision precision);

/// Forward: writes probs (attention_saved_floats floats, kept for the backward) and o. fp32
/// accumulation, exact expf. `precision` (fp32 overloads: Precision::fp32 or Precision::tf32, as
/// --precision): under tf32 the shapes of the tensor-core kernels (T <= 64, dh == 64; their
/// buffers must be aligned, see attention_saves_stats) run on TF32
/// tensor cores (attention_forward_mma_tf32: inputs rounded to tf32 as a TF32 GEMM does); fp32
/// keeps fp32 arithmetic. Precision::bf16 throws std::invalid_argument (bf16 storage takes the
/// bf16 overload).
void attention_forward(const float* qkv, float* probs, float* out, int batch, int T, int heads,
                       int head_dim, cudaStream_t stream, Precision precision = Precision::fp32);
void attention_forward(const __nv_bfloat16* qkv, float* probs, __nv_bfloat16* out, int batch,
                       int T, int heads, int head_dim, cudaStream_t stream);

/// Floats of scratch attention_backward needs: the score gradients, [B, H, T, T], for T > 64 or
/// head_dim > 64; 0 otherwise (the small-shape and tensor-core kernels keep them in shared memory).
size_t attention_backward_scratch_floats(int batch, int T, int heads, int head_dim);

/// Backward given dout = dL/do ([B*T, D]): with s = q k^T / sqrt(dh), p = softmax(s),
///   dv_j = sum_i p_ij do_i,  dp_ij = do_i . v_j,  ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik),
///   dq_i = sum_j ds_ij k_j / sqrt(dh),  dk_j = sum_i ds_ij q_i / sqrt(dh).
/// Writes (overwrites) dqkv [B*T, 3D] in the qkv layout. Deterministic (no atomics).
/// `precision` as for attention_forward (the fp32 overload).
/// scratch: attention_backward_scratch_floats.
/// dqkv_colsum (optional): [B, 3D] fp32, each batch item's column sums of dqkv as stored, written by
/// the tensor-core kernels (attention_backward_mma); only where attention_saves_stats, else
/// std::invalid_argument.
void attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv, float* scratch, int batch,
                        int T, int heads, int head_dim, cudaStream_t stream, Precision precision = Precision::fp32,
                        float* dqkv_colsum = nullptr);
void attention_backward(const __nv_bfloat16* qkv, const float* probs, const __nv_bfloat16* dout, __nv_bfloat16* dqkv,
                        float* scratch, int batch, int T, int heads, int head_dim, cudaStream_t stream,
                        float* dqkv_colsum = nullptr);

}  // namespace vitddp
