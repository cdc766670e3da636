// Parity of the cuDNN implementations (cuda/kernels/cudnn_attention.h, cuda/kernels/cudnn_conv.h) with the custom
// ones they replace and with host loops in double:
//  - fused attention (bf16) vs the custom bf16 attention kernels and a double-precision reference
//    on the same bf16 inputs, at ViT-L/32 and ViT-B/32 shapes (T = 50);
//  - the patch-embedding convolution vs im2col + cuBLASLt GEMM in fp32, tf32 and bf16;
//  - whole GpuViT models with the cuDNN paths vs the default paths.
// Every case prints its measured errors.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/kernels/attention.h"
#include "cuda/kernels/cudnn_attention.h"
#include "cuda/kernels/cudnn_conv.h"
#include "cuda/check/cudnn_version.h"
#include "cuda/model/gpu_vit.h"
#include "cuda/model/step_graph.h"
#include "cuda/kernels/lt_gemm.h"
#include "cuda/kernels/patch_embed.h"
#include "model/init.h"
#include "tests/catch.h"
#include "tests/gpu/attention_reference.h"
#include "tests/gpu/bf16_test_util.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

using namespace vitddp;
using namespace vitddp_test;
using bf16 = __nv_bfloat16;

namespace {

/// Columns [which*D, (which+1)*D) of a [rows, 3D] matrix (Q, K or V part of qkv / dqkv).
template <typename V>
std::vector<double> part(const std::vector<V>& m, int rows, int D, int which) {
  std::vector<double> out((size_t)rows * D);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < D; ++c) out[(size_t)r * D + c] = (double)m[(size_t)r * 3 * D + which * D + c];
  return out;
}

}  // namespace

TEST_CASE("cudnn attention: forward and backward match the custom bf16 kernels and a double reference",
          "[gpu][cudnn][attention]") {
  REQUIRE_GPU();
  Stream st;
  CudnnAttention cudnn(st.s);
  const int T = 50, dh = 64;
  cudnn.prepare(32, T, 16, dh);
  CHECK(cudnn.graph_count() == 2);
  struct Shape { int B, H; };
  const double tol = 1e-2;  // bf16 outputs (relative rounding 2^-9) of fp32-accumulated results
  std::printf("cuDNN %s, attention norm-relative errors (bf16 inputs; reference: double on the same inputs)\n",
              cudnn_runtime_version().c_str());
  for (const Shape sh : {Shape{2, 16}, Shape{7, 16}, Shape{32, 16}, Shape{4, 12}}) {
    const int B = sh.B, H = sh.H, D = H * dh, N = B * T;
    INFO("B=" << B << " T=" << T << " H=" << H << " dh=" << dh);
    const std::vector<float> hqkv = rounded(normal_vec((size_t)N * 3 * D, 31, (uint64_t)B * 100 + H));
    const std::vector<float> hdo = rounded(normal_vec((size_t)N * D, 32, (uint64_t)B * 100 + H));
    const AttentionRef ref = attention_reference(hqkv, hdo, B, T, H, dh);

    DevVec<bf16> qkv(to_bf16(hqkv)), dout(to_bf16(hdo)), out_c(N * (size_t)D), out_k(N * (size_t)D),
        dqkv_c(N * 3 * (size_t)D), dqkv_k(N * 3 * (size_t)D);
    DevVec<float> stats(CudnnAttention::stats_floats(B, T, H)), probs((size_t)B * H * T * T),
        scratch(attention_backward_scratch_floats(B, T, H, dh));
    cudnn.forward(qkv.get(), stats.get(), out_c.get(), B, T, H, dh);
    cudnn.backward(qkv.get(), out_c.get(), stats.get(), dout.get(), dqkv_c.get(), B, T, H, dh);
    attention_forward(qkv.get(), probs.get(), out_k.get(), B, T, H, dh, st.s);
    attention_backward(qkv.get(), probs.get(), dout.get(), dqkv_k.get(), scratch.get(), B, T, H, dh, st.s);
    CUDA_CHECK(cudaStreamSynchronize(st.s));
    const std::vector<float> oc = to_float(out_c.download()), ok = to_float(out_k.download()),
                             gc = to_float(dqkv_c.download()), gk = to_float(dqkv_k.download()),
                             lse = stats.download();

    const double e_out = norm_rel_err(oc, ref.out), e_out_k = norm_rel_err(ok, ref.out),
                 e_out_ck = norm_rel_err(oc, ok), e_lse = norm_rel_err(lse, ref.lse);
    CHECK(e_out <= tol);
    CHECK(e_out_k <= tol);
    CHECK(e_out_ck <= tol);
    CHECK(e_lse <= 1e-3);  // fp32 statistics of exact bf16 inputs
    std::printf("  B=%2d H=%2d: out %.2e (custom %.2e, cudnn-custom %.2e), stats %.2e", B, H, e_out, e_out_k,
                e_out_ck, e_lse);
    const char* names[3] = {"dQ", "dK", "dV"};
    for (int w = 0; w < 3; ++w) {
      const std::vector<double> r = part(ref.dqkv, N, D, w), c = part(gc, N, D, w), k = part(gk, N, D, w);
      const double e = norm_rel_err(c, r), ek = norm_rel_err(k, r), eck = norm_rel_err(c, k);
      INFO(names[w] << ": cudnn " << e << ", custom " << ek << ", cudnn vs custom " << eck);
      CHECK(e <= tol);
      CHECK(ek <= tol);
      CHECK(eck <= tol);
      std::printf(", %s %.2e (custom %.2e)", names[w], e, ek);
    }
    std::printf("\n");
  }
  // Batches other than the prepared one got their own graphs (forward + backward each).
  CHECK(cudnn.graph_count() == 2 * 4);
  CHECK(cudnn.device_bytes() > 0);
}

TEST_CASE("cudnn attention: 197 and 257 tokens, eager and in a CUDA graph, match a double reference",
          "[gpu][cudnn][attention]") {
  REQUIRE_GPU();
  Stream st;
  CudnnAttention cudnn(st.s);
  struct Shape {
    int B, T, H, dh;
  };
  const double tol = 1e-2;  // as above
  for (const Shape sh : {Shape{2, 197, 3, 64}, Shape{1, 257, 2, 80}}) {
    const int B = sh.B, T = sh.T, H = sh.H, dh = sh.dh, D = H * dh, N = B * T;
    INFO("B=" << B << " T=" << T << " H=" << H << " dh=" << dh);
    const std::vector<float> hqkv = rounded(normal_vec((size_t)N * 3 * D, 41, (uint64_t)T));
    const std::vector<float> hdo = rounded(normal_vec((size_t)N * D, 42, (uint64_t)T));
    const AttentionRef ref = attention_reference(hqkv, hdo, B, T, H, dh);
    DevVec<bf16> qkv(to_bf16(hqkv)), dout(to_bf16(hdo)), out(N * (size_t)D), dqkv(N * 3 * (size_t)D);
    DevVec<float> stats(CudnnAttention::stats_floats(B, T, H));
    // Graphs built first (as GpuViT does); call 0 is captured into a CUDA graph and launched (StepGraph,
    // as the trainer runs its step), call 1 runs eagerly.
    cudnn.prepare(B, T, H, dh);
    for (int call = 0; call < 2; ++call) {
      auto enqueue = [&] {
        cudnn.forward(qkv.get(), stats.get(), out.get(), B, T, H, dh);
        cudnn.backward(qkv.get(), out.get(), stats.get(), dout.get(), dqkv.get(), B, T, H, dh);
      };
      if (call == 0) {
        StepGraph graph;
        graph.capture(st.s, enqueue);
        graph.launch(st.s);
        CUDA_CHECK(cudaStreamSynchronize(st.s));
      } else {
        enqueue();
      }
      CUDA_CHECK(cudaStreamSynchronize(st.s));
      const double e_out = norm_rel_err(to_float(out.download()), ref.out),
                   e_lse = norm_rel_err(stats.download(), ref.lse),
                   e_d = norm_rel_err(to_float(dqkv.download()), ref.dqkv);
      std::printf("cuDNN attention B=%d T=%d H=%d dh=%d call %d: out %.2e, stats %.2e, dqkv %.2e\n", B, T, H, dh, call,
                  e_out, e_lse, e_d);
      CHECK(e_out <= tol);
      CHECK(e_lse <= 1e-3);
      CHECK(e_d <= tol);
    }
  }
}

TEST_CASE("cudnn attention: invalid shapes are rejected before anything is enqueued", "[gpu][cudnn][attention]") {
  REQUIRE_GPU();
  Stream st;
  CudnnAttention cudnn(st.s);
  CHECK_THROWS_AS(cudnn.prepare(0, 50, 16, 64), std::invalid_argument);
  CHECK_THROWS_AS(cudnn.prepare(2, 50, 16, 4), std::invalid_argument);  // head_dim not a multiple of 8
  CHECK(cudnn.graph_count() == 0);
}

namespace {

/// The GEMM path's conv_proj (im2col + nn.Linear GEMM) and weight gradient, in fp32 operands
/// (`compute` picks strict fp32 or TF32) or bf16 operands.
struct GemmPatchEmbed {
  std::vector<float> emb, dw;
};

template <typename TP>
GemmPatchEmbed gemm_patch_embed(const PatchGeometry& g, cublasComputeType_t compute, const float* images,
                                const TP* w, const float* bias, const TP* demb, cudaStream_t s) {
  LtGemmOptions lo;
  lo.compute = compute;
  LtGemm lt(s, lo);
  const int rows = g.batch * g.num_patches(), D = g.hidden, PD = g.patch_dim();
  DevVec<TP> patches((size_t)rows * PD);
  DevVec<float> emb((size_t)rows * D), dw((size_t)D * PD);
  patch_im2col(images, patches.get(), g, s);
  linear_forward(lt, patches.get(), w, bias, nullptr, emb.get(), rows, D, PD);
  linear_backward_weight(lt, demb, patches.get(), dw.get(), rows, D, PD, false);
  CUDA_CHECK(cudaStreamSynchronize(s));
  return {emb.download(), dw.download()};
}

}  // namespace

TEST_CASE("cudnn patch embedding: matches im2col + GEMM in fp32, tf32 and bf16", "[gpu][cudnn][patch_embed]") {
  REQUIRE_GPU();
  Stream st;
  PatchGeometry g;
  g.batch = 5;
  g.channels = 3;
  g.image = 224;
  g.patch = 32;
  g.hidden = 768;  // vit_b_32's conv_proj
  const int PD = g.patch_dim(), D = g.hidden;
  const std::vector<float> himg = normal_vec((size_t)g.batch * g.channels * g.image * g.image, 41, 0);
  const std::vector<float> hw = normal_vec((size_t)D * PD, 41, 1, 1.0 / std::sqrt((double)PD));
  const std::vector<float> hb = normal_vec(D, 41, 2);
  const std::vector<float> hdemb = normal_vec((size_t)g.batch * g.num_patches() * D, 41, 3);
  DevVec<float> img(himg), w(hw), b(hb), demb(hdemb);
  DevVec<bf16> w16(to_bf16(hw)), demb16(to_bf16(hdemb));

  struct Case { Precision p; double tol; };
  for (const Case c : {Case{Precision::fp32, 1e-5}, Case{Precision::tf32, 5e-3}, Case{Precision::bf16, 1e-2}}) {
    INFO("precision " << precision_name(c.p));
    CudnnPatchEmbed conv(g, c.p, st.s, /*autotune=*/c.p == Precision::tf32);
    conv.prepare(g.batch);
    for (const int B : {g.batch, 3}) {
      INFO("batch " << B << " of max " << g.batch);
      PatchGeometry gb = g;
      gb.batch = B;
      const size_t rows = (size_t)B * g.num_patches();
      DevVec<float> emb(rows * D), dw((size_t)D * PD);
      GemmPatchEmbed ref;  // strict fp32 GEMMs on the same operands as the cuDNN path
      if (c.p == Precision::bf16) {
        conv.forward(img.get(), w16.get(), b.get(), emb.get(), B);
        conv.backward_weight(demb16.get(), dw.get(), false, B);
        ref = gemm_patch_embed(gb, CUBLAS_COMPUTE_32F, img.get(), w16.get(), b.get(), demb16.get(), st.s);
      } else {
        conv.forward(img.get(), w.get(), b.get(), emb.get(), B);
        conv.backward_weight(demb.get(), dw.get(), false, B);
        ref = gemm_patch_embed(gb, CUBLAS_COMPUTE_32F_PEDANTIC, img.get(), w.get(), b.get(), demb.get(), st.s);
      }
      CUDA_CHECK(cudaStreamSynchronize(st.s));
      const double e_emb = norm_rel_err(emb.download(), ref.emb), e_dw = norm_rel_err(dw.download(), ref.dw);
      std::printf("patch embedding %s batch %d: cuDNN vs im2col+GEMM norm-rel err emb %.2e, dW %.2e\n",
                  precision_name(c.p), B, e_emb, e_dw);
      CHECK(e_emb <= c.tol);
      CHECK(e_dw <= c.tol);
      // accumulate=true adds.
      if (c.p == Precision::bf16) conv.backward_weight(demb16.get(), dw.get(), true, B);
      else conv.backward_weight(demb.get(), dw.get(), true, B);
      std::vector<float> twice = ref.dw;
      for (float& x : twice) x *= 2;
      CHECK(norm_rel_err(dw.download(), twice) <= c.tol);
    }
    // The other precision's overloads and bad batches are rejected.
    DevVec<float> emb((size_t)g.batch * g.num_patches() * D);
    if (c.p == Precision::bf16) CHECK_THROWS_AS(conv.forward(img.get(), w.get(), b.get(), emb.get(), 1), std::invalid_argument);
    else CHECK_THROWS_AS(conv.forward(img.get(), w16.get(), b.get(), emb.get(), 1), std::invalid_argument);
    CHECK_THROWS_AS(conv.prepare(g.batch + 1), std::invalid_argument);
    CHECK(conv.device_bytes() > 0);
  }
}

namespace {

struct ModelRun {
  std::vector<float> logits, grads;
  float loss = 0;
};

ModelRun run_model(const ParamLayout& L, const GpuViTOptions& o, int max_batch, int batch, uint64_t seed) {
  const std::vector<float> params = random_params(L, seed);
  const std::vector<float> img = random_images(L.cfg, batch, seed + 1);
  const std::vector<int32_t> lab = random_labels(L.cfg, batch, seed + 2);
  Stream st;
  DevVec<float> dp(params), dimg(img), dg(L.total), dloss(1);
  DevVec<int32_t> dlab(lab);
  GpuViT gpu(L, max_batch, st.s, o);
  gpu.forward(dp.get(), dimg.get(), dlab.get(), batch, dloss.get());
  gpu.backward(dp.get(), dg.get(), false, nullptr);
  CUDA_CHECK(cudaStreamSynchronize(st.s));
  ModelRun r;
  r.logits.resize((size_t)batch * L.cfg.num_classes);
  CUDA_CHECK(cudaMemcpy(r.logits.data(), gpu.logits(), r.logits.size() * sizeof(float), cudaMemcpyDeviceToHost));
  r.loss = dloss.download()[0];
  r.grads = dg.download();
  return r;
}

/// GpuViT with `variant` against GpuViT with `base` on the same inputs: logits, loss and every
/// gradient tensor within `tol` (norm-relative).
void compare_variants(const ViTConfig& cfg, int max_batch, int batch, const GpuViTOptions& base,
                      const GpuViTOptions& variant, double tol, const char* label) {
  const ParamLayout L = make_param_layout(cfg);
  const ModelRun a = run_model(L, base, max_batch, batch, 501);
  const ModelRun b = run_model(L, variant, max_batch, batch, 501);
  const double e_logits = norm_rel_err(b.logits, a.logits);
  const double e_loss = std::fabs((double)b.loss - a.loss) / std::fabs((double)a.loss);
  double worst = 0;
  std::string worst_name;
  for (const ParamInfo& p : L.params) {
    const double e = norm_rel_err(b.grads.data() + p.offset, a.grads.data() + p.offset, p.numel);
    INFO("gradient of " << p.name << ": norm-relative error " << e);
    CHECK(e <= tol);
    if (!(e <= worst)) {
      worst = e;
      worst_name = p.name;
    }
  }
  std::printf("[%s, %s, %d layers, batch %d of %d] logits %.2e, loss %.2e, worst gradient %.2e (%s)\n", label,
              cfg.name.c_str(), cfg.layers, batch, max_batch, e_logits, e_loss, worst, worst_name.c_str());
  CHECK(e_logits <= tol);
  CHECK(e_loss <= tol);
}

}  // namespace

TEST_CASE("gpu_vit: cuDNN attention and cuDNN patch embedding (bf16) match the default bf16 model within 3e-2",
          "[gpu][gpu_vit][cudnn]") {
  REQUIRE_GPU();
  ViTConfig cfg = vit_config("vit_b_32");
  cfg.layers = 2;
  const GpuViTOptions base = GpuViTOptions::for_precision(Precision::bf16);
  GpuViTOptions both = base, attn = base, conv = base;
  both.attention = attn.attention = AttentionImpl::cudnn;
  both.patch_embed = conv.patch_embed = PatchEmbedImpl::cudnn;
  compare_variants(cfg, 4, 4, base, attn, 3e-2, "bf16 cudnn attention");
  compare_variants(cfg, 4, 4, base, conv, 3e-2, "bf16 cudnn patch embedding");
  compare_variants(cfg, 4, 4, base, both, 3e-2, "bf16 cudnn both");
  // A batch smaller than max_batch (graphs built on first use), head_dim 16.
  compare_variants(vit_config("vit_tiny"), 5, 3, base, both, 3e-2, "bf16 cudnn both");
}

TEST_CASE("gpu_vit: cuDNN patch embedding matches the GEMM path in fp32 (1e-5 / 1e-4) and tf32 (5e-3)",
          "[gpu][gpu_vit][cudnn]") {
  REQUIRE_GPU();
  ViTConfig cfg = vit_config("vit_b_32");
  cfg.layers = 2;
  for (const Precision p : {Precision::fp32, Precision::tf32}) {
    const GpuViTOptions base = GpuViTOptions::for_precision(p);
    GpuViTOptions conv = base;
    conv.patch_embed = PatchEmbedImpl::cudnn;
    compare_variants(cfg, 4, 4, base, conv, p == Precision::fp32 ? 1e-4 : 5e-3,
                     p == Precision::fp32 ? "fp32 cudnn patch embedding" : "tf32 cudnn patch embedding");
  }
}

TEST_CASE("gpu_vit: cuDNN attention is refused outside bf16", "[gpu][gpu_vit][cudnn]") {
  REQUIRE_GPU();
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  Stream st;
  for (const Precision p : {Precision::fp32, Precision::tf32}) {
    GpuViTOptions o = GpuViTOptions::for_precision(p);
    o.attention = AttentionImpl::cudnn;
    CHECK_THROWS_AS(GpuViT(L, 2, st.s, o), std::invalid_argument);
  }
}
