// Multi-head self-attention core softmax(Q K^T / sqrt(dh)) V through cuDNN's fused scaled
// dot-product attention (the cuDNN graph API's SDPA forward and backward nodes, built with NVIDIA's
// header-only cudnn-frontend), bf16 operands, on a stream.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace vitddp {

/// cuDNN flash attention on the packed qkv layout of cuda/kernels/attention.h, with no copies:
///  - qkv: [B*T, 3D] bf16 row-major, D = H*dh (torch.nn.MultiheadAttention's packed in_proj
///    output). Q is read as a [B, H, T, dh] tensor with strides [T*3D, dh, 3D, 1] at qkv, K the
///    same at qkv + D, V at qkv + 2D.
///  - out: [B*T, D] bf16, heads concatenated (head h in columns h*dh..(h+1)*dh-1): O is written as
///    [B, H, T, dh] with strides [T*D, dh, D, 1], ready for out_proj.
///  - stats: [B, H, T] fp32 (cuDNN's Stats tensor [B, H, T, 1]): the softmax log-sum-exp of each
///    query row, lse[b,h,i] = log sum_j exp(q_i . k_j / sqrt(dh)); kept for the backward instead
///    of the [B, H, T, T] probabilities of the custom kernels beyond 64 tokens (stats_floats()).
///  - backward: given dout = dL/dout ([B*T, D] bf16) writes (overwrites) dqkv [B*T, 3D] bf16 in
///    the qkv layout (dQ, dK, dV through the same strides as Q, K, V).
/// Semantics: torch.nn.functional.scaled_dot_product_attention(q, k, v) with scale 1/sqrt(dh), no
/// mask, no dropout (cuDNN frontend docs, "Scaled Dot Product Attention": sdpa / sdpa_backward
/// with attn_scale, generate_stats). Inputs and outputs are bf16, the matmuls accumulate and the
/// softmax runs in fp32 (io bf16, intermediate and compute fp32). bf16 only: cuDNN's flash
/// attention needs fp16 or bf16 operands.
///
/// One cuDNN graph per direction and shape (B, T, H, dh), built on first use (or by prepare())
/// and cached; the batch may vary (e.g. a short last batch) and then gets its own graphs. The
/// workspace is one device buffer grown to the largest graph's need when a graph is built (an
/// outgrown buffer is kept until this object is destroyed: queued work or a captured CUDA graph
/// may still use it). Backward uses cuDNN's default algorithm
/// (not bit-reproducible across runs on every GPU) unless `deterministic_backward`.
///
/// Errors: cuDNN failures (handle creation, a graph that this cuDNN / GPU does not support for the
/// shape, execution) throw std::runtime_error naming the operation, the shape and cuDNN's message;
/// bad sizes throw std::invalid_argument. Nothing is enqueued by a call that throws.
class CudnnAttention {
 public:
  /// Creates a cuDNN handle bound to `stream`. Throws std::runtime_error when cuDNN cannot be
  /// initialised (e.g. no GPU, or libcudnn older than the graph API needs).
  explicit CudnnAttention(cudaStream_t stream, bool deterministic_backward = false);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  /// Floats of the stats buffer of one forward: B*H*T.
  static size_t stats_floats(int batch, int T, int heads);

  /// Builds (if not cached) the forward and backward graphs of this shape and grows the
  /// workspace, so that a shape cuDNN cannot run fails here, at set-up, and not mid-training.
  void prepare(int batch, int T, int heads, int head_dim);

  /// Forward: out and stats from qkv (layouts above; out and stats must not overlap qkv). Enqueued
  /// on the stream; no synchronisation once the shape's graph exists.
  void forward(const __nv_bfloat16* qkv, float* stats, __nv_bfloat16* out, int batch, int T,
               int heads, int head_dim);

  /// Backward of forward(qkv) -> (out, stats): writes dqkv [B*T, 3D] given dout [B*T, D]. `out`
  /// and `stats` are the forward's outputs. dqkv must not overlap the inputs.
  void backward(const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* stats,
                const __nv_bfloat16* dout, __nv_bfloat16* dqkv, int batch, int T, int heads,
                int head_dim);

  /// One execution plan of a shape: its index in the heuristics' list, cuDNN's engine and knob
  /// name, and its time.
  struct PlanTime {
    int64_t index = 0;
    std::string name;
    double ms = -1;       ///< ms per call, the mean of `reps` calls after one warm-up; -1 when it failed
    std::string error;    ///< cuDNN's message when the plan failed to build or run
    bool chosen = false;  ///< the plan forward() / backward() run
  };
  /// Every distinct execution plan cuDNN's heuristics (modes A and FALLBACK) give for this shape
  /// and direction, each built and run `reps` times on the given operands (as forward() /
  /// backward() take them; backward's `out` and `stats` must hold a forward's), in the heuristics'
  /// order. Synchronises the stream; allocates the plans' workspace while it runs; the cached
  /// graphs are untouched. Throws std::logic_error while the stream is being captured. For
  /// benchmarks: cuDNN's first choice against the other plans at a model's shapes.
  std::vector<PlanTime> time_plans(const __nv_bfloat16* qkv, __nv_bfloat16* out, float* stats,
                                   const __nv_bfloat16* dout, __nv_bfloat16* dqkv, int batch, int T, int heads,
                                   int head_dim, bool backward, int reps);

  /// Device bytes held (the workspace).
  size_t device_bytes() const;
  /// Number of cached graphs (forward and backward count separately).
  size_t graph_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vitddp
