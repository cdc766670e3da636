// GpuViT: torchvision VisionTransformer forward/backward in strict fp32 on one stream.
//
// Activations (row-major, N = B*T token rows, all sized for max_batch):
//   patches [B*Np, C*P*P]  im2col of the images (input of the conv-as-GEMM)
//   emb     [B*Np, D]      conv_proj output
//   x[l]    [N, D]         residual stream entering block l (x[L] leaves the last block)
//   per block l: y1 (LN1 out), mean1/rstd1, qkv [N,3D], probs [B,H,T,T], attn [N,D] (heads
//   concatenated), xmid [N,D] (= x[l] + out_proj), z (LN2 out), mean2/rstd2, u [N,M] (fc1 out),
//   g [N,M] (GELU(u)).  x[l+1] = xmid + fc2(g).
//   xf [B, D] final LN of the class-token rows only (the head sees nothing else), logits [B, K].
// GEMMs are nn.Linear forms (lt_gemm.h): biases and residual adds are fused into the cuBLASLt
// epilogue (D = A@B^T + bias + C); in backward, bias gradients come from the weight-gradient
// GEMM's BGRADB epilogue (or column_sum when accumulating). The residual-stream gradient lives in
// one [N, D] buffer that each LayerNorm backward adds into (the residual branch's identity path).
#include "cuda/gpu_vit.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/attention.h"
#include "cuda/check.h"
#include "cuda/device_arena.h"
#include "cuda/gelu.h"
#include "cuda/layernorm.h"
#include "cuda/loss.h"
#include "cuda/lt_gemm.h"
#include "cuda/patch_embed.h"
#include "cuda/reduce.h"

namespace vitddp {

namespace {
struct BlockActs {
  float *y1, *mean1, *rstd1, *qkv, *probs, *attn, *xmid, *z, *mean2, *rstd2, *u, *g;
};
}  // namespace

struct GpuViT::Impl {
  ParamLayout layout;
  ViTConfig cfg;
  int max_batch = 0;
  cudaStream_t stream = nullptr;
  DeviceArena arena;
  LtGemm lt;

  // Activations.
  float* patches = nullptr;
  float* emb = nullptr;
  std::vector<float*> x;  // layers + 1
  std::vector<BlockActs> acts;
  float *xf = nullptr, *meanf = nullptr, *rstdf = nullptr, *logits = nullptr, *dlogits = nullptr;
  // Backward scratch (shared by all blocks; everything runs in order on one stream).
  float *dx = nullptr;     // [N, D] gradient of the residual stream
  float *dwide = nullptr;  // [N, max(M, 3D)] gradient of g/u, or of qkv
  float *dnarrow = nullptr;  // [N, D] gradient of z, attn or y1
  float *dscores = nullptr;  // [B, H, T, T]
  float *demb = nullptr;     // [B*Np, D]
  float *dxf = nullptr;      // [B, D]
  float *reduce_scratch = nullptr;  // column sums / LN partials / loss rows
  size_t reduce_scratch_floats = 0;

  bool fused_bias_grad = true;
  int batch = 0;  // of the last forward
  bool have_forward = false;

  static LtGemmOptions gemm_options(const GpuViTOptions& o) {
    LtGemmOptions g;
    g.compute = CUBLAS_COMPUTE_32F_PEDANTIC;  // plain fp32 FMA, no reduced-precision shortcuts
    g.autotune_candidates = o.gemm_autotune_candidates;
    return g;
  }

  Impl(const ParamLayout& l, int mb, cudaStream_t s, const GpuViTOptions& o)
      : layout(l), cfg(l.cfg), max_batch(mb), stream(s), lt(s, gemm_options(o)),
        fused_bias_grad(o.fused_bias_grad) {}

  PatchGeometry geometry(int b) const {
    PatchGeometry g;
    g.batch = b;
    g.channels = cfg.channels;
    g.image = cfg.image_size;
    g.patch = cfg.patch_size;
    g.hidden = cfg.hidden;
    return g;
  }

  void allocate() {
    const size_t B = max_batch, T = cfg.seq_len(), D = cfg.hidden, M = cfg.mlp_dim,
                 H = cfg.heads, K = cfg.num_classes, Np = cfg.num_patches(), PD = cfg.patch_dim();
    const size_t N = B * T;
    patches = arena.alloc<float>(B * Np * PD, "patches");
    emb = arena.alloc<float>(B * Np * D, "patch embeddings");
    x.resize(cfg.layers + 1);
    for (int l = 0; l <= cfg.layers; ++l)
      x[l] = arena.alloc<float>(N * D, "residual stream x[" + std::to_string(l) + "]");
    acts.resize(cfg.layers);
    for (int l = 0; l < cfg.layers; ++l) {
      const std::string s = " of block " + std::to_string(l);
      BlockActs& a = acts[l];
      a.y1 = arena.alloc<float>(N * D, "ln_1 output" + s);
      a.mean1 = arena.alloc<float>(N, "ln_1 mean" + s);
      a.rstd1 = arena.alloc<float>(N, "ln_1 rstd" + s);
      a.qkv = arena.alloc<float>(N * 3 * D, "qkv" + s);
      a.probs = arena.alloc<float>(B * H * T * T, "attention probabilities" + s);
      a.attn = arena.alloc<float>(N * D, "attention output" + s);
      a.xmid = arena.alloc<float>(N * D, "post-attention residual" + s);
      a.z = arena.alloc<float>(N * D, "ln_2 output" + s);
      a.mean2 = arena.alloc<float>(N, "ln_2 mean" + s);
      a.rstd2 = arena.alloc<float>(N, "ln_2 rstd" + s);
      a.u = arena.alloc<float>(N * M, "mlp.0 output" + s);
      a.g = arena.alloc<float>(N * M, "GELU output" + s);
    }
    xf = arena.alloc<float>(B * D, "final LayerNorm output (class tokens)");
    meanf = arena.alloc<float>(B, "final LayerNorm mean");
    rstdf = arena.alloc<float>(B, "final LayerNorm rstd");
    logits = arena.alloc<float>(B * K, "logits");
    dlogits = arena.alloc<float>(B * K, "logits gradient");
    dx = arena.alloc<float>(N * D, "residual-stream gradient");
    dwide = arena.alloc<float>(N * std::max(M, 3 * D), "wide gradient scratch");
    dnarrow = arena.alloc<float>(N * D, "narrow gradient scratch");
    dscores = arena.alloc<float>(attention_backward_scratch_floats(max_batch, (int)T, (int)H),
                                 "attention score gradient");
    demb = arena.alloc<float>(B * Np * D, "patch embedding gradient");
    dxf = arena.alloc<float>(B * D, "final LayerNorm output gradient");
    const int Ni = (int)N, Di = (int)D, Mi = (int)M, Ki = (int)K;
    size_t r = 0;
    r = std::max(r, layernorm_backward_scratch_floats(Ni, Di));
    r = std::max(r, layernorm_backward_scratch_floats(max_batch, Di));
    r = std::max(r, column_sum_scratch_floats(Ni, std::max({Di, Mi, 3 * Di})));
    r = std::max(r, column_sum_scratch_floats(max_batch * (int)Np, Di));
    r = std::max(r, column_sum_scratch_floats(max_batch, Ki));
    r = std::max(r, softmax_xent_scratch_floats(max_batch));
    reduce_scratch_floats = r;
    reduce_scratch = arena.alloc<float>(r, "reduction scratch");
  }
};

GpuViT::GpuViT(const ParamLayout& layout, int max_batch, cudaStream_t stream,
               const GpuViTOptions& options) {
  const ViTConfig& c = layout.cfg;
  if (max_batch < 1) throw std::invalid_argument("GpuViT: max_batch must be >= 1");
  if (c.hidden % c.heads != 0 || c.image_size % c.patch_size != 0)
    throw std::invalid_argument("GpuViT: inconsistent config " + c.name);
  if (layout.params.size() != 8 + 12 * (size_t)c.layers)
    throw std::invalid_argument("GpuViT: parameter table does not match config " + c.name);
  if (c.seq_len() > 512 || c.head_dim() > 128 || c.hidden > 4096)
    throw std::invalid_argument("GpuViT: " + c.name +
                                " exceeds the kernels' limits (T <= 512, head_dim <= 128, D <= 4096)");
  impl_.reset(new Impl(layout, max_batch, stream, options));
  impl_->allocate();
}

GpuViT::~GpuViT() = default;

const float* GpuViT::logits() const { return impl_->logits; }

size_t GpuViT::device_bytes() const { return impl_->arena.bytes() + impl_->lt.device_bytes(); }

void GpuViT::forward(const float* d_params, const float* d_images, const int32_t* d_labels,
                     int batch, float* d_loss) {
  Impl& s = *impl_;
  if (batch < 1 || batch > s.max_batch)
    throw std::invalid_argument("GpuViT::forward: batch " + std::to_string(batch) +
                                " outside [1, max_batch=" + std::to_string(s.max_batch) + "]");
  const ViTConfig& c = s.cfg;
  const ViTTensors<const float> p = bind_tensors(s.layout, d_params);
  const int B = batch, T = c.seq_len(), D = c.hidden, M = c.mlp_dim, H = c.heads,
            K = c.num_classes, Np = c.num_patches(), PD = c.patch_dim();
  const int N = B * T;
  const float eps = (float)c.ln_eps;
  cudaStream_t st = s.stream;
  const PatchGeometry geo = s.geometry(B);

  // Patch embedding: conv_proj as im2col + GEMM (+ bias), then class token and positions.
  patch_im2col(d_images, s.patches, geo, st);
  linear_forward(s.lt, s.patches, p.conv_w, p.conv_b, nullptr, s.emb, B * Np, D, PD);
  assemble_tokens(s.emb, p.class_token, p.pos_embedding, s.x[0], geo, st);

  for (int l = 0; l < c.layers; ++l) {
    const BlockTensors<const float>& w = p.blocks[l];
    BlockActs& a = s.acts[l];
    layernorm_forward(s.x[l], D, w.ln1_w, w.ln1_b, a.y1, D, a.mean1, a.rstd1, N, D, eps, st);
    linear_forward(s.lt, a.y1, w.qkv_w, w.qkv_b, nullptr, a.qkv, N, 3 * D, D);
    attention_forward(a.qkv, a.probs, a.attn, B, T, H, c.head_dim(), st);
    linear_forward(s.lt, a.attn, w.proj_w, w.proj_b, s.x[l], a.xmid, N, D, D);
    layernorm_forward(a.xmid, D, w.ln2_w, w.ln2_b, a.z, D, a.mean2, a.rstd2, N, D, eps, st);
    linear_forward(s.lt, a.z, w.fc1_w, w.fc1_b, nullptr, a.u, N, M, D);
    gelu_forward(a.u, a.g, (size_t)N * M, st);
    linear_forward(s.lt, a.g, w.fc2_w, w.fc2_b, a.xmid, s.x[l + 1], N, D, M);
  }

  // Final LayerNorm on the class-token rows (row stride T*D), head, loss.
  const float* xl = s.x[c.layers];
  layernorm_forward(xl, T * D, p.ln_w, p.ln_b, s.xf, D, s.meanf, s.rstdf, B, D, eps, st);
  linear_forward(s.lt, s.xf, p.head_w, p.head_b, nullptr, s.logits, B, K, D);
  softmax_xent(s.logits, d_labels, B, K, d_loss, s.dlogits, s.reduce_scratch, st);
  s.batch = B;
  s.have_forward = true;
}

void GpuViT::backward(const float* d_params, float* d_grads, bool accumulate,
                      const GradReadyFn& on_ready) {
  Impl& s = *impl_;
  if (!s.have_forward) throw std::logic_error("GpuViT::backward called before forward");
  const ViTConfig& c = s.cfg;
  const ParamLayout& L = s.layout;
  const ViTTensors<const float> p = bind_tensors(L, d_params);
  const ViTTensors<float> gr = bind_tensors(L, d_grads);
  const int B = s.batch, T = c.seq_len(), D = c.hidden, M = c.mlp_dim, H = c.heads,
            K = c.num_classes, Np = c.num_patches(), PD = c.patch_dim();
  const int N = B * T;
  cudaStream_t st = s.stream;
  float* scratch = s.reduce_scratch;
  const bool acc = accumulate;

  // Registration indices, as in make_param_layout: 0 class_token, 1 conv_proj.weight,
  // 2 conv_proj.bias, 3 pos_embedding, then 12 per block, then ln.weight, ln.bias, head.weight,
  // head.bias. Groups are reported in gradient-ready order, each in reverse registration order.
  const size_t P = L.params.size();
  auto block_index = [](int l, int i) { return (size_t)(4 + 12 * l + i); };
  auto ready = [&](std::vector<size_t> idx) {
    if (on_ready) on_ready(idx);
  };
  // nn.Linear weight and bias gradients: dW (+)= dY^T X, db (+)= colsum(dY); dY is [m, n].
  auto linear_grads = [&](const float* dy, const float* xin, float* dw, float* db, int m, int n,
                          int k) {
    if (!acc && s.fused_bias_grad) {
      linear_backward_weight_bias(s.lt, dy, xin, dw, db, m, n, k);
    } else {
      linear_backward_weight(s.lt, dy, xin, dw, m, n, k, acc);
      column_sum(dy, m, n, n, db, acc, scratch, st);
    }
  };

  // Head: dW = dlogits^T @ xf, db = colsum(dlogits), dxf = dlogits @ W.
  linear_grads(s.dlogits, s.xf, gr.head_w, gr.head_b, B, K, D);
  ready({P - 1, P - 2});
  linear_backward_input(s.lt, s.dlogits, p.head_w, s.dxf, B, K, D);

  // Final LayerNorm: only the class-token rows of dx are non-zero.
  CUDA_CHECK(cudaMemsetAsync(s.dx, 0, sizeof(float) * (size_t)N * D, st));
  layernorm_backward(s.dxf, D, s.x[c.layers], T * D, s.meanf, s.rstdf, p.ln_w, s.dx, T * D, false,
                     gr.ln_w, gr.ln_b, acc, B, D, scratch, st);
  ready({P - 3, P - 4});

  for (int l = c.layers - 1; l >= 0; --l) {
    const BlockTensors<const float>& w = p.blocks[l];
    const BlockTensors<float>& g = gr.blocks[l];
    BlockActs& a = s.acts[l];
    // s.dx = dL/dx[l+1]. MLP down-projection (mlp.3).
    linear_grads(s.dx, a.g, g.fc2_w, g.fc2_b, N, D, M);
    ready({block_index(l, 11), block_index(l, 10)});
    linear_backward_input(s.lt, s.dx, w.fc2_w, s.dwide, N, D, M);
    gelu_backward(s.dwide, a.u, s.dwide, (size_t)N * M, st);
    // MLP up-projection (mlp.0).
    linear_grads(s.dwide, a.z, g.fc1_w, g.fc1_b, N, M, D);
    ready({block_index(l, 9), block_index(l, 8)});
    linear_backward_input(s.lt, s.dwide, w.fc1_w, s.dnarrow, N, M, D);
    // ln_2, plus the residual path: s.dx becomes dL/dxmid.
    layernorm_backward(s.dnarrow, D, a.xmid, D, a.mean2, a.rstd2, w.ln2_w, s.dx, D, true, g.ln2_w,
                       g.ln2_b, acc, N, D, scratch, st);
    ready({block_index(l, 7), block_index(l, 6)});
    // out_proj.
    linear_grads(s.dx, a.attn, g.proj_w, g.proj_b, N, D, D);
    ready({block_index(l, 5), block_index(l, 4)});
    linear_backward_input(s.lt, s.dx, w.proj_w, s.dnarrow, N, D, D);
    // Attention core, then in_proj.
    attention_backward(a.qkv, a.probs, s.dnarrow, s.dwide, s.dscores, B, T, H, c.head_dim(), st);
    linear_grads(s.dwide, a.y1, g.qkv_w, g.qkv_b, N, 3 * D, D);
    ready({block_index(l, 3), block_index(l, 2)});
    linear_backward_input(s.lt, s.dwide, w.qkv_w, s.dnarrow, N, 3 * D, D);
    // ln_1, plus the residual path: s.dx becomes dL/dx[l].
    layernorm_backward(s.dnarrow, D, s.x[l], D, a.mean1, a.rstd1, w.ln1_w, s.dx, D, true, g.ln1_w,
                       g.ln1_b, acc, N, D, scratch, st);
    ready({block_index(l, 1), block_index(l, 0)});
  }

  // Token assembly: positional embedding and class token, then conv_proj.
  const PatchGeometry geo = s.geometry(B);
  assemble_tokens_backward(s.dx, s.demb, gr.class_token, gr.pos_embedding, acc, geo, st);
  ready({3, 0});
  linear_grads(s.demb, s.patches, gr.conv_w, gr.conv_b, B * Np, D, PD);
  ready({2, 1});
}

}  // namespace vitddp
