// The attention probabilities of fp32 activations on TF32 tensor cores in one kernel: the scores
// and their row softmax for GemmAttention (cuda/kernels/attention_gemm.h) under --precision tf32,
// in place of a batched TF32 GEMM that writes the scores and a softmax pass that reads them back.
#pragma once
#include <cuda_runtime.h>

namespace vitddp {

/// True when attention_probs_tf32 takes this head_dim and these pointers: head_dim 64 or 80
/// (vit_b_16, vit_l_16: 64; vit_h_14: 80), qkv 16-byte and probs 8-byte aligned, ldp even.
bool attention_probs_tf32_fits(int head_dim, const void* qkv, const void* probs, int ldp);

/// probs[b, h, i, j] = softmax_j(q_i . k_j / sqrt(dh)) for i, j < T, written as [B, H, T, ldp] fp32
/// rows (columns T..ldp-1 not written), from qkv [B*T, 3*H*dh] fp32 in the packed layout of
/// cuda/kernels/attention.h. Q and K are rounded to tf32 (cvt.rna) and multiplied on tensor cores
/// with fp32 accumulation (mma.sync m16n8k8), the scale applied in fp32; the softmax is fp32 with
/// exact expf: each row's max and sum of exponentials over the key tiles (the sum rescaled when
/// the max grows, FlashAttention's online softmax: Dao 2022), then a second pass over the tiles
/// writes exp(s - max) / sum. One block of 4 warps per (64 query rows, head, image). Deterministic
/// (the same bits for the same inputs). Preconditions: attention_probs_tf32_fits, 1 <= T <= 512,
/// ldp >= T, 1 <= heads, batch <= 65535; std::invalid_argument otherwise, std::runtime_error on a
/// launch error. Enqueues on `stream`.
void attention_probs_tf32(const float* qkv, float* probs, int ldp, int batch, int T, int heads, int head_dim,
                          cudaStream_t stream);

}  // namespace vitddp
