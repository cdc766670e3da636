// GpuViT: torchvision VisionTransformer forward/backward on one stream, in fp32, TF32 or bf16.
//
// Activations (row-major, N = B*T token rows, all sized for max_batch). "op" marks a GEMM operand,
// stored in the operand type T (float in fp32/tf32, bf16 in bf16 mode); the rest is always fp32:
//   patches [B*Np, C*P*P] op  im2col of the images (input of the conv-as-GEMM; gemm patch
//                             embedding only: the cuDNN convolution keeps its own image copy)
//   emb     [B*Np, D]         conv_proj output
//   x[l]    [N, D]            residual stream entering block l (x[L] leaves the last block)
//   per block l: y1 (LN1 out, op), mean1/rstd1, qkv [N,3D] (op), probs (custom attention:
//   attention_saved_floats, [B,H,T,2] row statistics on the tensor-core kernels, else [B,H,T,T];
//   gemm: rows padded to GemmAttention::probs_ld(T); gemm_recompute: none, one shared attn_probs
//   instead; cuDNN attention keeps the softmax log-sum-exp [B,H,T] there), attn [N,D] (op,
//   heads concatenated), xmid [N,D] (= x[l] + out_proj), z (LN2 out, op), mean2/rstd2, u [N,M]
//   (fc1 out, op), g [N,M] (GELU(u), op; with recompute_gelu one buffer for every block, refilled
//   from u by backward's GELU pass).  x[l+1] = xmid + fc2(g).
//   xf [B, D] final LN of the class-token rows only (the head sees nothing else), logits [B, K].
// All of them live in one device allocation, the activation arena, at the offsets that
// plan_gpu_vit_arena (cuda/model/gpu_vit_arena.h) computes; the memory estimate sums the same plan.
// GEMMs are nn.Linear forms (lt_gemm.h): biases and residual adds are fused into the cuBLASLt
// epilogue (D = A@B^T + bias + C); in backward, the bias gradients of fc2 and out_proj are
// column sums taken by the LayerNorm backward that writes their output gradient, fc1's by the
// GELU backward, in_proj's by the tensor-core attention backward (T <= 64, head_dim 64, bf16 and
// tf32, the custom attention: not --attention cudnn or gemm), the others' by the weight-gradient
// GEMM's BGRADB epilogue (or column_sum when accumulating, or everywhere with fused_bias_grad
// off). The residual-stream gradient lives in one fp32 [N, D] buffer that each LayerNorm backward
// adds into (the residual branch's identity path); in bf16 mode the LayerNorm backward also writes
// its bf16 copy for the GEMMs.
// One templated pass (forward_pass<T>, backward_pass<T>) serves all precisions; with T = float it
// is exactly the original fp32 sequence of kernels and GEMMs.
#include "cuda/model/gpu_vit.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/kernels/attention.h"
#include "cuda/kernels/attention_gemm.h"
#include "cuda/kernels/cast.h"
#include "cuda/check/check_cuda.h"
#include "cuda/kernels/cudnn_attention.h"
#include "cuda/kernels/cudnn_conv.h"
#include "cuda/model/device_buffer.h"
#include "cuda/kernels/gelu.h"
#include "cuda/model/gpu_vit_arena.h"
#include "cuda/kernels/layernorm.h"
#include "cuda/kernels/loss.h"
#include "cuda/kernels/lt_gemm.h"
#include "cuda/kernels/patch_embed.h"
#include "cuda/kernels/reduce.h"

namespace vitddp {

namespace {
using bf16 = __nv_bfloat16;

/// Activations of one encoder block; T is the GEMM-operand type.
template <typename T>
struct BlockActs {
  T *y1 = nullptr, *qkv = nullptr, *attn = nullptr, *z = nullptr, *u = nullptr, *g = nullptr;
  float *mean1 = nullptr, *rstd1 = nullptr, *xmid = nullptr, *mean2 = nullptr, *rstd2 = nullptr;
  float* probs = nullptr;  // custom: attention_saved_floats (row statistics or [B,H,T,T] probabilities); gemm: [B,H,T,ldp]; cuDNN: [B,H,T] statistics; gemm_recompute: null
};

/// Every buffer whose element type is the GEMM-operand type T.
template <typename T>
struct OperandBuffers {
  T* patches = nullptr;
  std::vector<BlockActs<T>> blocks;
  T* dwide = nullptr;    // [N, max(M, 3D)] gradient of g/u, or of qkv
  T* dnarrow = nullptr;  // [N, D] gradient of z, attn or y1
  T* demb = nullptr;     // [B*Np, D]
  T* dx_op = nullptr;    // residual-stream gradient as a GEMM operand (fp32: the fp32 buffer itself)
};

cublasComputeType_t compute_type(Precision p) {
  switch (p) {
    case Precision::fp32: return CUBLAS_COMPUTE_32F_PEDANTIC;  // plain fp32 FMA, no shortcuts
    case Precision::tf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case Precision::bf16: return CUBLAS_COMPUTE_32F;  // bf16 operands, fp32 accumulation
  }
  return CUBLAS_COMPUTE_32F_PEDANTIC;
}
}  // namespace

struct GpuViT::Impl {
  ParamLayout layout;
  ViTConfig cfg;
  int max_batch = 0;
  cudaStream_t stream = nullptr;
  Precision precision = Precision::fp32;
  GpuViTArenaPlan plan;       // where each buffer lives in `arena`
  DeviceBuffer<char> arena;   // every activation buffer, one allocation
  LtGemm lt;
  AttentionImpl attention = AttentionImpl::custom;
  PatchEmbedImpl patch_embed = PatchEmbedImpl::gemm;
  std::unique_ptr<CudnnAttention> cudnn_attention;  // attention == cudnn
  std::unique_ptr<GemmAttention> gemm_attention;    // attention == gemm or gemm_recompute (fp32 activations)
  std::unique_ptr<CudnnPatchEmbed> cudnn_conv;      // patch_embed == cudnn

  // fp32 activations.
  float* emb = nullptr;
  std::vector<float*> x;  // layers + 1
  float *xf = nullptr, *meanf = nullptr, *rstdf = nullptr, *logits = nullptr, *dlogits = nullptr;
  // Operand-typed activations: f32 in fp32/tf32, b16 in bf16 (only one is allocated).
  OperandBuffers<float> f32;
  OperandBuffers<bf16> b16;
  bf16* weights16 = nullptr;  // bf16 working copy of the parameters (bf16 mode)
  // Backward scratch (shared by all blocks; everything runs in order on one stream).
  float* dx = nullptr;       // [N, D] gradient of the residual stream (fp32)
  float* dscores = nullptr;  // [B, H, T, T] (custom attention's large-shape path, else null; the gemm attention's dS, [B,H,T,ldp])
  float* attn_probs = nullptr;  // gemm_recompute: the probabilities of the block being run, recomputed in backward
  float* dxf = nullptr;      // [B, D]
  float* reduce_scratch = nullptr;  // column sums / LN partials / loss rows / gemm attention's pointer arrays
  size_t reduce_scratch_floats = 0;

  bool fused_bias_grad = true;
  bool refresh_bf16 = true;
  bool overlay_gradients = false;
  bool recompute_gelu = false;  // GpuViTOptions::recompute_gelu: a.g is one shared buffer
  int backward_sm_count = 0;  // cuBLASLt SM count target of backward's GEMMs (0: all SMs)
  float* gradients = nullptr;  // the overlaid flat gradient buffer (overlay_gradients), else null
  int batch = 0;  // of the last forward
  bool have_forward = false;

  /// `tf32x3_scratch`: LtGemmOptions::tf32x3_scratch_bytes (0 unless fp32_matmul_tf32x3).
  static LtGemmOptions gemm_options(const GpuViTOptions& o, size_t tf32x3_scratch = 0) {
    LtGemmOptions g;
    g.compute = compute_type(o.precision);
    g.autotune_candidates = o.gemm_autotune_candidates;
    g.tf32x3_scratch_bytes = tf32x3_scratch;
    return g;
  }

  Impl(const ParamLayout& l, int mb, cudaStream_t s, const GpuViTOptions& o)
      : layout(l),
        cfg(l.cfg),
        max_batch(mb),
        stream(s),
        precision(o.precision),
        lt(s, gemm_options(o, o.fp32_matmul_tf32x3 ? gpu_vit_tf32x3_scratch_bytes(l.cfg, mb) : 0)),
        attention(o.attention),
        patch_embed(o.patch_embed),
        fused_bias_grad(o.fused_bias_grad),
        refresh_bf16(o.refresh_bf16_weights),
        overlay_gradients(o.overlay_gradients),
        recompute_gelu(o.recompute_gelu) {
    if (o.fp32_matmul_tf32x3 && precision != Precision::fp32)
      throw std::invalid_argument(std::string("GpuViT: the 3xTF32 GEMMs need fp32 precision (got ") +
                                  precision_name(precision) + ")");
    if (o.backward_sm_carveout != 0) {
      const int sms = lt.device_sm_count();
      if (o.backward_sm_carveout < 0 || o.backward_sm_carveout >= sms)
        throw std::invalid_argument("GpuViT: backward SM carveout " +
                                    std::to_string(o.backward_sm_carveout) + " outside [0, " +
                                    std::to_string(sms - 1) + "] on a GPU with " +
                                    std::to_string(sms) + " SMs");
      backward_sm_count = sms - o.backward_sm_carveout;
    }
    if (attention == AttentionImpl::cudnn) {
      if (precision != Precision::bf16)
        throw std::invalid_argument(std::string("GpuViT: cuDNN attention needs bf16 precision (got ") +
                                    precision_name(precision) + ")");
      cudnn_attention = std::make_unique<CudnnAttention>(s, o.deterministic);
      cudnn_attention->prepare(max_batch, cfg.seq_len(), cfg.heads, cfg.head_dim());
    }
    if (is_gemm_attention(attention)) {
      if (precision == Precision::bf16)
        throw std::invalid_argument("GpuViT: the batched-GEMM attention needs fp32 activations (fp32 or tf32 precision)");
      // The products share the LtGemm workspace: every GEMM of this model runs in order on `s`.
      gemm_attention = std::make_unique<GemmAttention>(s, lt.compute_type(), lt.workspace(), lt.workspace_bytes());
    }
    if (patch_embed == PatchEmbedImpl::cudnn) {
      cudnn_conv = std::make_unique<CudnnPatchEmbed>(geometry(max_batch), precision, s,
                                                     o.gemm_autotune_candidates > 1);
      cudnn_conv->prepare(max_batch);
    }
  }

  template <typename T>
  OperandBuffers<T>& ops() {
    if constexpr (std::is_same_v<T, float>) return f32;
    else return b16;
  }

  PatchGeometry geometry(int b) const {
    PatchGeometry g;
    g.batch = b;
    g.channels = cfg.channels;
    g.image = cfg.image_size;
    g.patch = cfg.patch_size;
    g.hidden = cfg.hidden;
    return g;
  }

  /// Binds every buffer to its place in the one arena allocation (cuda/model/gpu_vit_arena.h: the
  /// same plan the memory estimate sums).
  template <typename T>
  void bind_operands(char* base) {
    const GpuViTArenaPlan& p = plan;
    OperandBuffers<T>& o = ops<T>();
    auto at = [base](size_t offset) { return reinterpret_cast<T*>(base + offset); };
    o.patches = p.patches == GpuViTArenaPlan::npos ? nullptr : at(p.patches);
    o.blocks.resize(cfg.layers);
    for (int l = 0; l < cfg.layers; ++l) {
      BlockActs<T>& a = o.blocks[l];
      const GpuViTArenaPlan::Block& b = p.blocks[l];
      a.y1 = at(b.y1);
      a.qkv = at(b.qkv);
      a.attn = at(b.attn);
      a.z = at(b.z);
      a.u = at(b.u);
      a.g = at(recompute_gelu ? p.gelu_out : b.g);  // recompute_gelu: one buffer, every block's in turn
      auto f = [base](size_t offset) { return reinterpret_cast<float*>(base + offset); };
      a.mean1 = f(b.mean1);
      a.rstd1 = f(b.rstd1);
      a.probs = b.probs == GpuViTArenaPlan::npos ? nullptr : f(b.probs);
      a.xmid = f(b.xmid);
      a.mean2 = f(b.mean2);
      a.rstd2 = f(b.rstd2);
    }
    o.dwide = at(p.dwide);
    o.dnarrow = at(p.dnarrow);
    o.demb = at(p.demb);
    if constexpr (std::is_same_v<T, float>) o.dx_op = dx;
    else o.dx_op = at(p.dx16);
  }

  void allocate() {
    plan = plan_gpu_vit_arena(cfg, layout.total, max_batch, precision, overlay_gradients, attention, patch_embed,
                              recompute_gelu);
    arena = DeviceBuffer<char>(plan.total_bytes, "the activation arena (" + cfg.name + ", batch " +
                                                     std::to_string(max_batch) + ", " +
                                                     precision_name(precision) + ")");
    char* base = arena.get();
    auto f = [base](size_t offset) { return reinterpret_cast<float*>(base + offset); };
    emb = f(plan.emb);
    x.clear();
    for (size_t off : plan.x) x.push_back(f(off));
    xf = f(plan.xf);
    meanf = f(plan.meanf);
    rstdf = f(plan.rstdf);
    logits = f(plan.logits);
    dlogits = f(plan.dlogits);
    dx = f(plan.dx);
    dscores = plan.dscores == GpuViTArenaPlan::npos ? nullptr : f(plan.dscores);
    attn_probs = plan.attn_probs == GpuViTArenaPlan::npos ? nullptr : f(plan.attn_probs);
    dxf = f(plan.dxf);
    reduce_scratch = f(plan.reduce_scratch);
    reduce_scratch_floats = plan.reduce_scratch_floats;
    if (plan.gradients != GpuViTArenaPlan::npos) gradients = f(plan.gradients);
    if (precision == Precision::bf16) {
      weights16 = reinterpret_cast<bf16*>(base + plan.weights16);
      bind_operands<bf16>(base);
    } else {
      bind_operands<float>(base);
    }
  }

  /// The GEMM-operand view of an fp32 parameter tensor p inside the flat buffer `params`:
  /// p itself (T = float) or the same offset in the bf16 working copy.
  template <typename T>
  const T* operand(const float* params, const float* p) const {
    if constexpr (std::is_same_v<T, float>) return p;
    else return weights16 + (p - params);
  }

  /// The attention core of one block (custom kernels, cuDNN or batched GEMMs; cuDNN only with
  /// T = bf16, the GEMMs only with T = float; the GEMMs' pointer arrays in reduce_scratch; with
  /// gemm_recompute the probabilities live in attn_probs, shared by the blocks, and backward
  /// recomputes them there first, planned for every SM as forward's were, so with the same bits;
  /// the last block's are still there from forward: `probs_current`).
  template <typename T>
  void attention_core_forward(BlockActs<T>& a, int B) {
    const int T_ = cfg.seq_len(), H = cfg.heads, dh = cfg.head_dim();
    if constexpr (std::is_same_v<T, bf16>) {
      if (cudnn_attention) return cudnn_attention->forward(a.qkv, a.probs, a.attn, B, T_, H, dh);
    } else {
      if (gemm_attention)
        return gemm_attention->forward(a.qkv, attn_probs ? attn_probs : a.probs, a.attn, B, T_, H, dh, reduce_scratch);
    }
    if constexpr (std::is_same_v<T, bf16>) attention_forward(a.qkv, a.probs, a.attn, B, T_, H, dh, stream);
    else attention_forward(a.qkv, a.probs, a.attn, B, T_, H, dh, stream, precision);
  }
  // Writes dqkv; returns true when it also wrote dqkv's per-batch-item column sums into colsum
  // ([B, 3D], when colsum is given and the tensor-core kernels run: attention_backward's
  // dqkv_colsum), for in_proj's bias gradient.
  template <typename T>
  bool attention_core_backward(BlockActs<T>& a, const T* dout, T* dqkv, int B, bool probs_current, float* colsum) {
    const int T_ = cfg.seq_len(), H = cfg.heads, dh = cfg.head_dim();
    if constexpr (std::is_same_v<T, bf16>) {
      if (cudnn_attention) {
        cudnn_attention->backward(a.qkv, a.attn, a.probs, dout, dqkv, B, T_, H, dh);
        return false;
      }
    } else {
      if (gemm_attention) {
        if (attn_probs && !probs_current) {
          gemm_attention->set_sm_count_target(0);
          gemm_attention->probs(a.qkv, attn_probs, B, T_, H, dh, reduce_scratch);
          gemm_attention->set_sm_count_target(backward_sm_count);
        }
        gemm_attention->backward(a.qkv, attn_probs ? attn_probs : a.probs, dout, dqkv, dscores, B, T_, H, dh,
                                 reduce_scratch);
        return false;
      }
    }
    const Precision p = std::is_same_v<T, bf16> ? Precision::bf16 : precision;
    float* const sums = attention_saves_stats(T_, dh, p) ? colsum : nullptr;
    if constexpr (std::is_same_v<T, bf16>)
      attention_backward(a.qkv, a.probs, dout, dqkv, dscores, B, T_, H, dh, stream, sums);
    else
      attention_backward(a.qkv, a.probs, dout, dqkv, dscores, B, T_, H, dh, stream, precision, sums);
    return sums != nullptr;
  }

  template <typename T>
  void forward_pass(const float* d_params, const float* d_images, const int32_t* d_labels, int B,
                    float* d_loss, const ParamsNeededFn& before);
  template <typename T>
  void backward_pass(const float* d_params, float* d_grads, bool acc, const GradReadyFn& on_ready,
                     const WeightUpdate& update);
};

template <typename T>
void GpuViT::Impl::forward_pass(const float* d_params, const float* d_images,
                                const int32_t* d_labels, int B, float* d_loss, const ParamsNeededFn& before) {
  const ViTConfig& c = cfg;
  const ModelParams& mp = layout.named;
  // The hook's groups (model/params_needed.h); with the bf16 refresh below every one at once.
  auto need = [&](const std::vector<ParamRef>& group) {
    if (!before) return;
    std::vector<size_t> idx;
    for (const ParamRef& r : group) idx.push_back(r.index);
    before(idx);
  };
  const std::vector<ParamRef> embed = {mp.conv_w, mp.conv_b}, tokens = {mp.cls, mp.pos},
                              head = {mp.ln_w, mp.ln_b, mp.head_w, mp.head_b};
  const ViTTensors<const float> p = bind_tensors(layout, d_params);
  OperandBuffers<T>& o = ops<T>();
  const int T_ = c.seq_len(), D = c.hidden, M = c.mlp_dim, K = c.num_classes,
            Np = c.num_patches(), PD = c.patch_dim();
  const int N = B * T_;
  const float eps = (float)c.ln_eps;
  cudaStream_t st = stream;
  const PatchGeometry geo = geometry(B);
  auto W = [&](const float* w) { return operand<T>(d_params, w); };
  const bool all_at_once = std::is_same_v<T, bf16> && refresh_bf16;  // the cast reads every parameter
  if (all_at_once) {  // every group, in the order of use, before the cast
    need(embed);
    need(tokens);
    for (int l = 0; l < c.layers; ++l) need(mp.blocks[l].all());
    need(head);
  }
  if constexpr (!std::is_same_v<T, float>) {
    if (refresh_bf16) convert_to_bf16(d_params, weights16, layout.total, st);
  }
  if (!all_at_once) need(embed);

  // Patch embedding: conv_proj as im2col + GEMM (+ bias) or as a cuDNN convolution, then class
  // token and positions.
  if (cudnn_conv) {
    cudnn_conv->forward(d_images, W(p.conv_w), p.conv_b, emb, B);
  } else {
    patch_im2col(d_images, o.patches, geo, st);
    linear_forward(lt, o.patches, W(p.conv_w), p.conv_b, nullptr, emb, B * Np, D, PD);
  }
  if (!all_at_once) need(tokens);
  assemble_tokens(emb, p.class_token, p.pos_embedding, x[0], geo, st);

  for (int l = 0; l < c.layers; ++l) {
    const BlockTensors<const float>& w = p.blocks[l];
    BlockActs<T>& a = o.blocks[l];
    if (!all_at_once) need(mp.blocks[l].all());
    layernorm_forward(x[l], D, w.ln1_w, w.ln1_b, a.y1, D, a.mean1, a.rstd1, N, D, eps, st);
    linear_forward(lt, a.y1, W(w.qkv_w), W(w.qkv_b), nullptr, a.qkv, N, 3 * D, D);
    attention_core_forward(a, B);
    linear_forward(lt, a.attn, W(w.proj_w), w.proj_b, x[l], a.xmid, N, D, D);
    layernorm_forward(a.xmid, D, w.ln2_w, w.ln2_b, a.z, D, a.mean2, a.rstd2, N, D, eps, st);
    linear_forward(lt, a.z, W(w.fc1_w), W(w.fc1_b), nullptr, a.u, N, M, D);
    gelu_forward(a.u, a.g, (size_t)N * M, st);
    linear_forward(lt, a.g, W(w.fc2_w), w.fc2_b, a.xmid, x[l + 1], N, D, M);
  }

  // Final LayerNorm on the class-token rows (row stride T*D), head, loss: fp32 in every mode.
  const float* xl = x[c.layers];
  if (!all_at_once) need(head);
  layernorm_forward(xl, T_ * D, p.ln_w, p.ln_b, xf, D, meanf, rstdf, B, D, eps, st);
  linear_forward(lt, xf, p.head_w, p.head_b, nullptr, logits, B, K, D);
  softmax_xent(logits, d_labels, B, K, d_loss, dlogits, reduce_scratch, st);
}

template <typename T>
void GpuViT::Impl::backward_pass(const float* d_params, float* d_grads, bool acc, const GradReadyFn& on_ready,
                                 const WeightUpdate& update) {
  const ViTConfig& c = cfg;
  const ParamLayout& L = layout;
  const ViTTensors<const float> p = bind_tensors(L, d_params);
  const ViTTensors<float> gr = bind_tensors(L, d_grads);
  // With update.params: the block weights updated in place (weights_updated_in_backward).
  const bool upd = update.params != nullptr;
  const ViTTensors<float> pu = bind_tensors(L, upd ? update.params : d_grads);
  OperandBuffers<T>& o = ops<T>();
  const int B = batch, T_ = c.seq_len(), D = c.hidden, M = c.mlp_dim,
            K = c.num_classes, Np = c.num_patches(), PD = c.patch_dim();
  const int N = B * T_;
  cudaStream_t st = stream;
  float* scratch = reduce_scratch;
  auto W = [&](const float* w) { return operand<T>(d_params, w); };
  // bf16 copy of the residual-stream gradient written by every LayerNorm backward (bf16 mode).
  bf16* dx16 = nullptr;
  if constexpr (!std::is_same_v<T, float>) dx16 = o.dx_op;
  T* const dxo = o.dx_op;  // the residual-stream gradient as a GEMM operand

  // Finished gradients are reported by registration index (L.named, looked up by torchvision
  // name): groups in gradient-ready order, each bias before its weight (model/grad_ready.h).
  const ModelParams& mp = L.named;
  auto ready = [&](const ParamRef& a, const ParamRef& b) {
    if (on_ready) on_ready({a.index, b.index});
  };
  // nn.Linear weight and bias gradients (fp32): dW (+)= dY^T X, db (+)= colsum(dY); dY is [m, n].
  auto linear_grads = [&](const auto* dy, const auto* xin, float* dw, float* db, int m, int n,
                          int k) {
    if (!acc && fused_bias_grad && linear_backward_weight_bias(lt, dy, xin, dw, db, m, n, k)) return;
    linear_backward_weight(lt, dy, xin, dw, m, n, k, acc);
    column_sum(dy, m, n, n, db, acc, scratch, st);
  };
  // With fused_bias_grad, the bias gradients of fc2 and out_proj come from the LayerNorm backward
  // that writes their output gradient (the residual-stream gradient, dx_colsum), and fc1's from
  // the GELU backward (gelu_backward_bias): no pass over dY of their own, and a plain weight GEMM.
  // Measured on an H200 (results/h200/kernels/bias-fusion).
  const bool fuse = fused_bias_grad;
  auto weight_grad = [&](const auto* dy, const auto* xin, float* dw, int m, int n, int k) {
    linear_backward_weight(lt, dy, xin, dw, m, n, k, acc);
  };
  // A block weight's gradient, or with `upd` its SGD step in place (w_new: the tensor in
  // update.params; its input-gradient GEMM has run); db: the bias gradient to take with it (or
  // nullptr: taken elsewhere).
  auto block_weight = [&](const auto* dy, const auto* xin, float* dw, float* w_new, float* db, int m, int n, int k) {
    if (!upd) {
      if (db)
        linear_grads(dy, xin, dw, db, m, n, k);
      else
        weight_grad(dy, xin, dw, m, n, k);
      return;
    }
    linear_update_weight(lt, dy, xin, w_new, update.alpha_beta, m, n, k);
    if (db) column_sum(dy, m, n, n, db, false, scratch, st);
  };

  // Head (fp32): dW = dlogits^T @ xf, db = colsum(dlogits), dxf = dlogits @ W.
  linear_grads(dlogits, xf, gr.head_w, gr.head_b, B, K, D);
  ready(mp.head_b, mp.head_w);
  linear_backward_input(lt, dlogits, p.head_w, dxf, B, K, D);

  // Final LayerNorm: only the class-token rows of dx are non-zero.
  CUDA_CHECK(cudaMemsetAsync(dx, 0, sizeof(float) * (size_t)N * D, st));
  if (dx16) CUDA_CHECK(cudaMemsetAsync(dx16, 0, sizeof(bf16) * (size_t)N * D, st));
  // dx's non-zero rows are the class tokens', so its column sums are the last fc2's bias gradient.
  layernorm_backward(dxf, D, x[c.layers], T_ * D, meanf, rstdf, p.ln_w, dx, T_ * D, false,
                     gr.ln_w, gr.ln_b, acc, B, D, scratch, st, dx16,
                     fuse && c.layers > 0 ? gr.blocks[c.layers - 1].fc2_b : nullptr);
  ready(mp.ln_b, mp.ln_w);

  for (int l = c.layers - 1; l >= 0; --l) {
    const BlockTensors<const float>& w = p.blocks[l];
    const BlockTensors<float>& g = gr.blocks[l];
    const BlockParams& bp = mp.blocks[l];
    BlockActs<T>& a = o.blocks[l];
    // dx = dL/dx[l+1]. MLP down-projection (mlp.3), whose weight gradient reads the GELU output
    // a.g: kept from forward, or (recompute_gelu) rewritten into the shared buffer by the GELU
    // backward, which then runs first.
    const BlockTensors<float>& wn = pu.blocks[l];
    auto fc2_grads = [&] {  // fc2_b with fuse: by the LayerNorm backward above
      block_weight(dxo, a.g, g.fc2_w, wn.fc2_w, fuse ? nullptr : g.fc2_b, N, D, M);
      ready(bp.fc2_b, bp.fc2_w);
    };
    // With `upd` every block weight's input gradient comes first: the update overwrites it (in
    // fp32 and tf32 the input-gradient GEMMs read the fp32 weights themselves).
    if (!recompute_gelu && !upd) fc2_grads();
    linear_backward_input(lt, dxo, W(w.fc2_w), o.dwide, N, D, M);
    if (!recompute_gelu && upd) fc2_grads();
    // MLP up-projection (mlp.0).
    T* const regelu = recompute_gelu ? a.g : nullptr;
    if (fuse) {
      gelu_backward_bias(o.dwide, a.u, o.dwide, N, M, g.fc1_b, acc, scratch, st, regelu);
    } else {
      if (regelu) gelu_forward(a.u, regelu, (size_t)N * M, st);
      gelu_backward(o.dwide, a.u, o.dwide, (size_t)N * M, st);
    }
    if (recompute_gelu) fc2_grads();
    auto fc1_grads = [&] {  // fc1_b with fuse: by the GELU backward above
      block_weight(o.dwide, a.z, g.fc1_w, wn.fc1_w, fuse ? nullptr : g.fc1_b, N, M, D);
      ready(bp.fc1_b, bp.fc1_w);
    };
    if (!upd) fc1_grads();
    linear_backward_input(lt, o.dwide, W(w.fc1_w), o.dnarrow, N, M, D);
    if (upd) fc1_grads();
    // ln_2, plus the residual path: dx becomes dL/dxmid.
    layernorm_backward(o.dnarrow, D, a.xmid, D, a.mean2, a.rstd2, w.ln2_w, dx, D, true, g.ln2_w,
                       g.ln2_b, acc, N, D, scratch, st, dx16, fuse ? g.proj_b : nullptr);
    ready(bp.ln2_b, bp.ln2_w);
    // out_proj.
    auto proj_grads = [&] {  // proj_b with fuse: by ln_2's backward
      block_weight(dxo, a.attn, g.proj_w, wn.proj_w, fuse ? nullptr : g.proj_b, N, D, D);
      ready(bp.proj_b, bp.proj_w);
    };
    if (!upd) proj_grads();
    linear_backward_input(lt, dxo, W(w.proj_w), o.dnarrow, N, D, D);
    if (upd) proj_grads();
    // Attention core, then in_proj. With fuse and the tensor-core attention, in_proj's bias
    // gradient comes from the attention backward's column sums (one [B, 3D] row per batch item, in
    // the reduction scratch) instead of a pass over dqkv (cuBLASLt's BGRADB epilogue, a kernel of
    // its own), summed at once: the scratch is read before anything else writes it.
    const bool qkv_b_partials =
        attention_core_backward(a, o.dnarrow, o.dwide, B, l == c.layers - 1, fuse ? scratch : nullptr);
    if (qkv_b_partials) column_sum_partials(scratch, B, 3 * D, g.qkv_b, acc, st);  // (upd: never acc)
    auto qkv_grads = [&] {
      block_weight(o.dwide, a.y1, g.qkv_w, wn.qkv_w, qkv_b_partials ? nullptr : g.qkv_b, N, 3 * D, D);
      ready(bp.qkv_b, bp.qkv_w);
    };
    if (!upd) qkv_grads();
    linear_backward_input(lt, o.dwide, W(w.qkv_w), o.dnarrow, N, 3 * D, D);
    if (upd) qkv_grads();
    // ln_1, plus the residual path: dx becomes dL/dx[l].
    // dx becomes block l-1's output gradient: its column sums are block l-1's fc2 bias gradient.
    layernorm_backward(o.dnarrow, D, x[l], D, a.mean1, a.rstd1, w.ln1_w, dx, D, true, g.ln1_w,
                       g.ln1_b, acc, N, D, scratch, st, dx16,
                       fuse && l > 0 ? gr.blocks[l - 1].fc2_b : nullptr);
    ready(bp.ln1_b, bp.ln1_w);
  }

  // Token assembly: positional embedding and class token, then conv_proj.
  const PatchGeometry geo = geometry(B);
  assemble_tokens_backward(dx, o.demb, gr.class_token, gr.pos_embedding, acc, geo, st);
  ready(mp.pos, mp.cls);
  if (cudnn_conv) {
    cudnn_conv->backward_weight(o.demb, gr.conv_w, acc, B);
    column_sum(o.demb, B * Np, D, D, gr.conv_b, acc, scratch, st);
  } else {
    linear_grads(o.demb, o.patches, gr.conv_w, gr.conv_b, B * Np, D, PD);
  }
  ready(mp.conv_b, mp.conv_w);
}

GpuViT::GpuViT(const ParamLayout& layout, int max_batch, cudaStream_t stream,
               const GpuViTOptions& options) {
  const ViTConfig& c = layout.cfg;
  if (max_batch < 1) throw std::invalid_argument("GpuViT: max_batch must be >= 1");
  if (c.hidden % c.heads != 0 || c.image_size % c.patch_size != 0)
    throw std::invalid_argument("GpuViT: inconsistent config " + c.name);
  if (layout.named.blocks.size() != (size_t)c.layers)
    throw std::invalid_argument("GpuViT: parameter table does not match config " + c.name +
                                " (build it with make_param_layout)");
  if (c.seq_len() > 512 || c.head_dim() > 128 || c.hidden > 4096)
    throw std::invalid_argument("GpuViT: " + c.name +
                                " exceeds the kernels' limits (T <= 512, head_dim <= 128, D <= 4096)");
  if (options.overlay_gradients && layout.total != layout.parameter_count())
    throw std::invalid_argument("GpuViT: overlay_gradients needs a layout without padding (" + c.name + " has " +
                                std::to_string(layout.total - layout.parameter_count()) + " padding elements)");
  impl_.reset(new Impl(layout, max_batch, stream, options));
  impl_->allocate();
}

GpuViT::~GpuViT() = default;

const float* GpuViT::logits() const { return impl_->logits; }

float* GpuViT::gradients() const { return impl_->gradients; }

size_t GpuViT::device_bytes() const { return impl_->arena.size() + impl_->lt.device_bytes() + cudnn_bytes(); }

size_t GpuViT::cudnn_bytes() const {
  const Impl& s = *impl_;
  return (s.cudnn_attention ? s.cudnn_attention->device_bytes() : 0) + (s.cudnn_conv ? s.cudnn_conv->device_bytes() : 0);
}

size_t GpuViT::workspace_bytes(const GpuViTOptions& options) {
  return Impl::gemm_options(options).workspace_bytes;
}

Precision GpuViT::precision() const { return impl_->precision; }

__nv_bfloat16* GpuViT::bf16_weights() const { return impl_->weights16; }

void GpuViT::set_gemm_timing(bool on) { impl_->lt.set_timing(on); }

double GpuViT::take_gemm_ms() { return impl_->lt.take_timed_ms(); }

std::vector<TimedGemm> GpuViT::take_gemm_calls() { return impl_->lt.take_timed_calls(); }

void GpuViT::forward(const float* d_params, const float* d_images, const int32_t* d_labels,
                     int batch, float* d_loss, const ParamsNeededFn& before) {
  Impl& s = *impl_;
  if (batch < 1 || batch > s.max_batch)
    throw std::invalid_argument("GpuViT::forward: batch " + std::to_string(batch) +
                                " outside [1, max_batch=" + std::to_string(s.max_batch) + "]");
  if (s.precision == Precision::bf16) s.forward_pass<bf16>(d_params, d_images, d_labels, batch, d_loss, before);
  else s.forward_pass<float>(d_params, d_images, d_labels, batch, d_loss, before);
  s.batch = batch;
  s.have_forward = true;
}

void GpuViT::backward(const float* d_params, float* d_grads, bool accumulate, const GradReadyFn& on_ready,
                      const WeightUpdate& update) {
  Impl& s = *impl_;
  if (!s.have_forward) throw std::logic_error("GpuViT::backward called before forward");
  if (update.params && (accumulate || !update.alpha_beta || update.params != d_params))
    throw std::invalid_argument(
        "GpuViT::backward: an update in backward needs accumulate = false, alpha_beta and "
        "params == d_params");
  // Backward's GEMMs (the gemm attention's products too) are planned for the SMs NCCL leaves
  // free; forward's for all of them.
  struct SmTarget {
    LtGemm& lt;
    GemmAttention* attention;
    ~SmTarget() {
      lt.set_sm_count_target(0);
      // cublasSetSmCountTarget(0) fails only on a broken handle; a destructor must not throw.
      try {
        if (attention) attention->set_sm_count_target(0);
      } catch (...) {
      }
    }
  } restore{s.lt, s.gemm_attention.get()};
  s.lt.set_sm_count_target(s.backward_sm_count);
  if (s.gemm_attention) s.gemm_attention->set_sm_count_target(s.backward_sm_count);
  if (s.precision == Precision::bf16)
    s.backward_pass<bf16>(d_params, d_grads, accumulate, on_ready, update);
  else
    s.backward_pass<float>(d_params, d_grads, accumulate, on_ready, update);
}

}  // namespace vitddp
