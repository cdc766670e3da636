// Hidden benchmark [attention_bench] ([.bench]): the cuDNN implementations against the custom ones
// at vit_l_32 batch-32 shapes, to choose the defaults of --attention and --patch-embed:
//  - attention core (B=32, T=50, H=16, dh=64): custom bf16 kernels vs cuDNN fused flash attention,
//    forward and forward + backward, per call and per training step (x 24 layers); the custom
//    fp32 kernels and cuDNN's deterministic backward as extra rows;
//  - patch embedding conv_proj (32 x 3 x 224 x 224 -> 32 x 49 x 1024): im2col + cuBLASLt GEMM vs
//    cuDNN convolution, forward and forward + weight/bias gradient, in fp32, tf32 and bf16.
// CUDA events around 50 calls after 10 warm-up calls; prints a markdown table. A configuration
// that fails (e.g. a cuDNN graph this GPU / cuDNN does not support) prints its error in the table
// instead of a time.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/kernels/attention.h"
#include "cuda/kernels/cudnn_attention.h"
#include "cuda/kernels/cudnn_conv.h"
#include "cuda/check/cudnn_version.h"
#include "cuda/kernels/lt_gemm.h"
#include "cuda/kernels/patch_embed.h"
#include "cuda/kernels/reduce.h"
#include "tests/catch.h"
#include "tests/gpu/bf16_test_util.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;
using bf16 = __nv_bfloat16;

namespace {

constexpr int kWarmup = 10, kReps = 50;

/// Mean ms per call of fn over kReps calls after kWarmup calls; NaN (and the message in *error)
/// when fn throws.
double bench_ms(cudaStream_t st, const std::function<void()>& fn, std::string* error) {
  try {
    for (int i = 0; i < kWarmup - 3; ++i) fn();  // time_ms adds 3 more
    return time_ms(st, fn, kReps);
  } catch (const std::exception& e) {
    cudaStreamSynchronize(st);
    (void)cudaGetLastError();
    if (error) *error = e.what();
    return NAN;
  }
}

/// The name of device 0.
std::string device_name() {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return prop.name;
}

std::string cell(double ms) {
  if (std::isnan(ms)) return "failed";
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", ms);
  return b;
}

std::string ratio(double a, double b) {
  if (std::isnan(a) || std::isnan(b) || b <= 0) return "-";
  char s[32];
  std::snprintf(s, sizeof s, "%.2fx", a / b);
  return s;
}

struct Row {
  std::string what;
  double custom, cudnn;
};

void print_table(const char* title, const char* left, const std::vector<Row>& rows) {
  std::printf("\n%s\n\n| %s | %s ms | cuDNN ms | %s / cuDNN |\n|---|---:|---:|---:|\n", title, "operation", left, left);
  for (const Row& r : rows)
    std::printf("| %s | %s | %s | %s |\n", r.what.c_str(), cell(r.custom).c_str(), cell(r.cudnn).c_str(),
                ratio(r.custom, r.cudnn).c_str());
}

}  // namespace

TEST_CASE("bench: cuDNN fused attention and cuDNN patch embedding vs custom (vit_l_32, batch 32)",
          "[.bench][attention_bench]") {
  REQUIRE_GPU();
  Stream st;
  std::printf("device %s, cuDNN %s (built with %d), %d reps after %d warm-up calls, CUDA events\n",
              device_name().c_str(), cudnn_runtime_version().c_str(), (int)CUDNN_VERSION, kReps, kWarmup);
  std::vector<std::string> errors;
  auto note = [&](const std::string& what, const std::string& err) {
    if (!err.empty()) errors.push_back(what + ": " + err);
  };

  // ---- attention core ----
  const int B = 32, T = 50, H = 16, dh = 64, D = H * dh, N = B * T, layers = 24;
  DevVec<bf16> qkv16(std::vector<bf16>((size_t)N * 3 * D)), out16((size_t)N * D), dout16((size_t)N * D),
      dqkv16((size_t)N * 3 * D);
  {
    std::vector<float> h = normal_vec((size_t)N * 3 * D, 7, 0);
    std::vector<bf16> hb(h.size());
    for (size_t i = 0; i < h.size(); ++i) hb[i] = __float2bfloat16_rn(h[i]);
    qkv16.upload(hb);
    h = normal_vec((size_t)N * D, 7, 1);
    hb.resize(h.size());
    for (size_t i = 0; i < h.size(); ++i) hb[i] = __float2bfloat16_rn(h[i]);
    dout16.upload(hb);
  }
  DevVec<float> qkv32(normal_vec((size_t)N * 3 * D, 7, 0)), out32((size_t)N * D),
      dout32(normal_vec((size_t)N * D, 7, 1)), dqkv32((size_t)N * 3 * D), probs((size_t)B * H * T * T),
      scratch(attention_backward_scratch_floats(B, T, H, dh)), stats(CudnnAttention::stats_floats(B, T, H));

  auto custom_fwd16 = [&] { attention_forward(qkv16.get(), probs.get(), out16.get(), B, T, H, dh, st.s); };
  auto custom_bwd16 = [&] {
    attention_backward(qkv16.get(), probs.get(), dout16.get(), dqkv16.get(), scratch.get(), B, T, H, dh, st.s);
  };
  auto custom_fwd32 = [&] { attention_forward(qkv32.get(), probs.get(), out32.get(), B, T, H, dh, st.s); };
  auto custom_bwd32 = [&] {
    attention_backward(qkv32.get(), probs.get(), dout32.get(), dqkv32.get(), scratch.get(), B, T, H, dh, st.s);
  };
  std::string err;
  const double cf16 = bench_ms(st.s, custom_fwd16, &err);
  const double cfb16 = bench_ms(st.s, [&] { custom_fwd16(); custom_bwd16(); }, &err);
  const double cf32 = bench_ms(st.s, custom_fwd32, &err);
  const double cfb32 = bench_ms(st.s, [&] { custom_fwd32(); custom_bwd32(); }, &err);
  note("custom attention", err);

  double nf = NAN, nfb = NAN, dfb = NAN;
  err.clear();
  try {
    CudnnAttention cudnn(st.s);
    cudnn.prepare(B, T, H, dh);
    auto fwd = [&] { cudnn.forward(qkv16.get(), stats.get(), out16.get(), B, T, H, dh); };
    auto bwd = [&] { cudnn.backward(qkv16.get(), out16.get(), stats.get(), dout16.get(), dqkv16.get(), B, T, H, dh); };
    nf = bench_ms(st.s, fwd, &err);
    nfb = bench_ms(st.s, [&] { fwd(); bwd(); }, &err);
  } catch (const std::exception& e) {
    err = e.what();
  }
  note("cuDNN attention", err);
  err.clear();
  try {
    CudnnAttention det(st.s, /*deterministic_backward=*/true);
    det.prepare(B, T, H, dh);
    dfb = bench_ms(st.s, [&] {
      det.forward(qkv16.get(), stats.get(), out16.get(), B, T, H, dh);
      det.backward(qkv16.get(), out16.get(), stats.get(), dout16.get(), dqkv16.get(), B, T, H, dh);
    }, &err);
  } catch (const std::exception& e) {
    err = e.what();
  }
  note("cuDNN attention, deterministic backward", err);

  const std::string per_step = " per step (x" + std::to_string(layers) + " layers)";
  print_table("Attention core, B=32 T=50 H=16 dh=64 (bf16 unless noted)", "custom",
              {{"forward", cf16, nf},
               {"forward + backward", cfb16, nfb},
               {"forward" + per_step, cf16 * layers, nf * layers},
               {"forward + backward" + per_step, cfb16 * layers, nfb * layers},
               {"forward + backward, cuDNN deterministic backward", cfb16, dfb},
               {"forward (custom in fp32)", cf32, nf},
               {"forward + backward (custom in fp32)", cfb32, nfb}});

  // ---- patch embedding ----
  PatchGeometry g;
  g.batch = 32;
  g.channels = 3;
  g.image = 224;
  g.patch = 32;
  g.hidden = 1024;
  const int rows = g.batch * g.num_patches(), PD = g.patch_dim(), Dp = g.hidden;
  DevVec<float> img(normal_vec((size_t)g.batch * g.channels * g.image * g.image, 9, 0)),
      w(normal_vec((size_t)Dp * PD, 9, 1, 0.02)), bias(normal_vec(Dp, 9, 2)), emb((size_t)rows * Dp),
      demb(normal_vec((size_t)rows * Dp, 9, 3)), dw((size_t)Dp * PD), db(Dp),
      col_scratch(column_sum_scratch_floats(rows, Dp)), patches32((size_t)rows * PD);
  DevVec<bf16> w16((size_t)Dp * PD), demb16((size_t)rows * Dp), patches16((size_t)rows * PD);
  {
    std::vector<float> h = normal_vec((size_t)Dp * PD, 9, 1, 0.02);
    std::vector<bf16> hb(h.size());
    for (size_t i = 0; i < h.size(); ++i) hb[i] = __float2bfloat16_rn(h[i]);
    w16.upload(hb);
    h = normal_vec((size_t)rows * Dp, 9, 3);
    hb.resize(h.size());
    for (size_t i = 0; i < h.size(); ++i) hb[i] = __float2bfloat16_rn(h[i]);
    demb16.upload(hb);
  }
  std::vector<Row> prow;
  for (const Precision p : {Precision::fp32, Precision::tf32, Precision::bf16}) {
    const bool b16 = p == Precision::bf16;
    LtGemmOptions lo;
    lo.compute = p == Precision::fp32 ? CUBLAS_COMPUTE_32F_PEDANTIC
                 : p == Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                        : CUBLAS_COMPUTE_32F;
    lo.autotune_candidates = 16;  // as GpuViT
    LtGemm lt(st.s, lo);
    auto gemm_fwd = [&] {
      if (b16) {
        patch_im2col(img.get(), patches16.get(), g, st.s);
        linear_forward(lt, patches16.get(), w16.get(), bias.get(), nullptr, emb.get(), rows, Dp, PD);
      } else {
        patch_im2col(img.get(), patches32.get(), g, st.s);
        linear_forward(lt, patches32.get(), w.get(), bias.get(), nullptr, emb.get(), rows, Dp, PD);
      }
    };
    auto gemm_bwd = [&] {  // GpuViT's linear_grads with overwrite: fused bias gradient where offered
      const bool fused = b16 ? linear_backward_weight_bias(lt, demb16.get(), patches16.get(), dw.get(), db.get(), rows, Dp, PD)
                             : linear_backward_weight_bias(lt, demb.get(), patches32.get(), dw.get(), db.get(), rows, Dp, PD);
      if (fused) return;
      if (b16) {
        linear_backward_weight(lt, demb16.get(), patches16.get(), dw.get(), rows, Dp, PD, false);
        column_sum(demb16.get(), rows, Dp, Dp, db.get(), false, col_scratch.get(), st.s);
      } else {
        linear_backward_weight(lt, demb.get(), patches32.get(), dw.get(), rows, Dp, PD, false);
        column_sum(demb.get(), rows, Dp, Dp, db.get(), false, col_scratch.get(), st.s);
      }
    };
    err.clear();
    const double gf = bench_ms(st.s, gemm_fwd, &err);
    const double gfb = bench_ms(st.s, [&] { gemm_fwd(); gemm_bwd(); }, &err);
    note(std::string("im2col + GEMM patch embedding ") + precision_name(p), err);
    double nf2 = NAN, nfb2 = NAN;
    err.clear();
    try {
      CudnnPatchEmbed conv(g, p, st.s, /*autotune=*/true);
      conv.prepare(g.batch);
      auto fwd = [&] {
        if (b16) conv.forward(img.get(), w16.get(), bias.get(), emb.get(), g.batch);
        else conv.forward(img.get(), w.get(), bias.get(), emb.get(), g.batch);
      };
      auto bwd = [&] {
        if (b16) {
          conv.backward_weight(demb16.get(), dw.get(), false, g.batch);
          column_sum(demb16.get(), rows, Dp, Dp, db.get(), false, col_scratch.get(), st.s);
        } else {
          conv.backward_weight(demb.get(), dw.get(), false, g.batch);
          column_sum(demb.get(), rows, Dp, Dp, db.get(), false, col_scratch.get(), st.s);
        }
      };
      nf2 = bench_ms(st.s, fwd, &err);
      nfb2 = bench_ms(st.s, [&] { fwd(); bwd(); }, &err);
    } catch (const std::exception& e) {
      err = e.what();
    }
    note(std::string("cuDNN patch embedding ") + precision_name(p), err);
    prow.push_back({std::string(precision_name(p)) + " forward", gf, nf2});
    prow.push_back({std::string(precision_name(p)) + " forward + weight/bias gradient", gfb, nfb2});
  }
  print_table("Patch embedding conv_proj, 32 x 3 x 224 x 224 -> [32*49, 1024] (once per step)", "im2col+GEMM",
              prow);
  if (!errors.empty()) {
    std::printf("\nErrors:\n");
    for (const std::string& e : errors) std::printf("- %s\n", e.c_str());
  }
  std::printf("\n");
}

// Hidden benchmark [cudnn_plans_bench] ([.bench]): every execution plan cuDNN's heuristics give for
// the SDPA forward and backward at the torchvision models whose attention runs through cuDNN
// (197 and 257 tokens), timed on the same operands, against the plan CudnnAttention runs without
// autotuning (the heuristics' first choice, "chosen"). Prints a markdown table.
TEST_CASE("bench: cuDNN attention execution plans at the 197- and 257-token models' shapes",
          "[.bench][cudnn_plans_bench]") {
  REQUIRE_GPU();
  Stream st;
  std::printf("device %s, cuDNN %s, %d calls a plan after one warm-up call, CUDA events\n\n", device_name().c_str(),
              cudnn_runtime_version().c_str(), kReps);
  struct Shape {
    const char* model;
    int B, T, H, dh;
  };
  std::printf(
      "| model | B | T | H | dh | direction | plan | cuDNN engine and knobs | ms | vs chosen |\n"
      "|---|---:|---:|---:|---:|---|---|---|---:|---:|\n");
  for (const Shape& s : {Shape{"vit_b_16", 32, 197, 12, 64}, Shape{"vit_b_16", 128, 197, 12, 64},
                         Shape{"vit_l_16", 32, 197, 16, 64}, Shape{"vit_h_14", 32, 257, 16, 80}}) {
    const size_t N = (size_t)s.B * s.T, D = (size_t)s.H * s.dh;
    DevVec<bf16> qkv(to_bf16(normal_vec(N * 3 * D, 11, 0))), out(N * D), dout(to_bf16(normal_vec(N * D, 11, 1))),
        dqkv(N * 3 * D);
    DevVec<float> stats(CudnnAttention::stats_floats(s.B, s.T, s.H));
    CudnnAttention att(st.s);
    att.forward(qkv.get(), stats.get(), out.get(), s.B, s.T, s.H, s.dh);
    for (const bool backward : {false, true}) {
      const std::vector<CudnnAttention::PlanTime> plans = att.time_plans(
          qkv.get(), out.get(), stats.get(), dout.get(), dqkv.get(), s.B, s.T, s.H, s.dh, backward, kReps);
      const auto chosen = std::find_if(plans.begin(), plans.end(), [](const auto& p) { return p.chosen; });
      CHECK(chosen != plans.end());  // the plan forward() / backward() run, timed
      const double ref = chosen != plans.end() ? chosen->ms : NAN;
      for (const CudnnAttention::PlanTime& p : plans) {
        std::string err = "failed: " + p.error;  // one table cell: no newlines or bars
        std::replace_if(
            err.begin(), err.end(), [](char c) { return c == '\n' || c == '|'; }, ' ');
        std::printf("| %s | %d | %d | %d | %d | %s | %lld%s | %s | %s | %s |\n", s.model, s.B, s.T, s.H, s.dh,
                    backward ? "backward" : "forward", (long long)p.index, p.chosen ? " (chosen)" : "", p.name.c_str(),
                    p.ms > 0 ? cell(p.ms).c_str() : err.c_str(), p.ms > 0 ? ratio(p.ms, ref).c_str() : "-");
      }
    }
  }
  std::printf("\n");
}
