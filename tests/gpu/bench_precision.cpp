// Hidden benchmarks ([.bench]) of the run-time precisions:
//  - [precision_bench]: a vit_l_32 batch-32 training step (GpuViT forward + backward, then the
//    SGD step vitddp runs) in fp32, tf32 and bf16: medians of 20 steps after 10 warm-up steps,
//    TFLOP/s at 3 x forward FLOPs x 32 per step, and the share of the time spent in GEMMs
//    (measured with CUDA events around every GEMM in 20 further steps).
//  - [precision_ops]: where the time goes - every GEMM shape of one encoder block in each
//    precision, and the bf16 custom kernels, at vit_l_32 batch-32 shapes.
//  - [gemm_calls]: every GEMM of a vit_l_32 batch-32 training step in tf32 and bf16, timed inside
//    the step (events around each, eager, the GEMMs autotuned as in vitddp) beside its autotuned
//    time alone and the heuristic's first candidate's, grouped by shape and algorithm.
#include <map>
#include <tuple>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cuda/kernels/attention.h"
#include "cuda/kernels/cast.h"
#include "cuda/kernels/gelu.h"
#include "cuda/model/gpu_vit.h"
#include "cuda/kernels/layernorm.h"
#include "cuda/kernels/lt_gemm.h"
#include "cuda/kernels/reduce.h"
#include "cuda/kernels/sgd.h"
#include "model/init.h"
#include "model/rng.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;
using bf16 = __nv_bfloat16;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

float elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

}  // namespace

TEST_CASE("bench: vit_l_32 batch-32 training step in fp32, tf32 and bf16", "[.bench][precision_bench]") {
  REQUIRE_GPU();
  const ParamLayout L = make_param_layout(vit_config("vit_l_32"));
  const int B = 32, warmup = 10, iters = 20;
  const double flops = 3.0 * forward_flops_per_image(L.cfg) * B;
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  StepInputs in(L, B);
  DevVec<float>& dp = in.params, &dg = in.grads, &dimg = in.images, &dloss = in.loss;
  DevVec<int32_t>& dlab = in.labels;
  const SgdConfig sgd{1e-3, 0.0, 0.0};
  std::vector<cudaEvent_t> ev(4 * iters);
  for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));

  struct Row {
    std::string name;
    double fwd, bwd, fb, step, gemm, fb_timed;
    size_t bytes;
    float loss;
  };
  std::vector<Row> rows;
  for (const Precision prec : {Precision::fp32, Precision::tf32, Precision::bf16}) {
    dp.upload(in.host_params);
    GpuViT gpu(L, B, st, GpuViTOptions::for_precision(prec));
    auto step = [&](int i, bool timed) {
      if (timed) CUDA_CHECK(cudaEventRecord(ev[4 * i], st));
      gpu.forward(dp.get(), dimg.get(), dlab.get(), B, dloss.get());
      if (timed) CUDA_CHECK(cudaEventRecord(ev[4 * i + 1], st));
      gpu.backward(dp.get(), dg.get(), false, {});
      if (timed) CUDA_CHECK(cudaEventRecord(ev[4 * i + 2], st));
      sgd_step_gpu(dp.get(), dg.get(), nullptr, L.total, sgd, false, st);
      if (timed) CUDA_CHECK(cudaEventRecord(ev[4 * i + 3], st));
    };
    for (int i = 0; i < warmup; ++i) step(i, false);
    const float loss = dloss.download()[0];
    // Timed steps back to back (no host synchronisation between them, as in vitddp).
    for (int i = 0; i < iters; ++i) step(i, true);
    CUDA_CHECK(cudaEventSynchronize(ev[4 * iters - 1]));
    std::vector<double> f, b, fb, s;
    for (int i = 0; i < iters; ++i) {
      f.push_back(elapsed(ev[4 * i], ev[4 * i + 1]));
      b.push_back(elapsed(ev[4 * i + 1], ev[4 * i + 2]));
      fb.push_back(elapsed(ev[4 * i], ev[4 * i + 2]));
      s.push_back(elapsed(ev[4 * i], ev[4 * i + 3]));
    }
    // GEMM share: events around every GEMM (synchronising once per step to collect them).
    gpu.set_gemm_timing(true);
    std::vector<double> g, fbt;
    for (int i = 0; i < iters; ++i) {
      step(0, true);
      CUDA_CHECK(cudaEventSynchronize(ev[3]));
      g.push_back(gpu.take_gemm_ms());
      fbt.push_back(elapsed(ev[0], ev[2]));
    }
    gpu.set_gemm_timing(false);
    rows.push_back({precision_name(prec), median(f), median(b), median(fb), median(s), median(g),
                    median(fbt), gpu.device_bytes() + 2 * L.total * sizeof(float), loss});
    CHECK(std::isfinite(loss));
  }
  std::printf("\nvit_l_32, batch 32, one H200 stream: medians of %d steps after %d warm-up steps; "
              "TFLOP/s = 3 x %.2f GFLOP x %d / step time (forward + backward + SGD)\n",
              iters, warmup, forward_flops_per_image(L.cfg) / 1e9, B);
  std::printf("| precision | forward ms | backward ms | fwd+bwd ms | step ms (+SGD) | steps/s | TFLOP/s | "
              "GEMM ms | GEMM share | device MiB (model + params + grads) | loss after warm-up |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const Row& r : rows)
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f | %.2f | %.0f%% | %.0f | %.4f |\n",
                r.name.c_str(), r.fwd, r.bwd, r.fb, r.step, 1e3 / r.step, flops / (r.step * 1e-3) / 1e12,
                r.gemm, 100.0 * r.gemm / r.fb_timed, r.bytes / 1048576.0, r.loss);
  std::printf("(GEMM share = GEMM time / forward+backward time, both measured with per-GEMM events on)\n");
  for (auto& e : ev) cudaEventDestroy(e);
  cudaStreamDestroy(st);
}

TEST_CASE("bench: GEMMs and kernels of one block in fp32, tf32 and bf16 (vit_l_32 batch-32 shapes)",
          "[.bench][precision_ops]") {
  REQUIRE_GPU();
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const int B = 32, T = 50, D = 1024, M = 4096, H = 16, N = B * T;
  const size_t big = (size_t)N * M * 2;
  const auto hbig = normal_vec(big, 31, 0), hw = normal_vec((size_t)M * 3 * D / 2, 31, 1);
  DevVec<float> x(hbig), w(hw), bias(normal_vec(4 * D, 31, 2)), r(normal_vec((size_t)N * M, 31, 3)),
      y(big), y2(big);
  DevVec<bf16> x16(big), w16(hw.size()), b16(4 * D), r16((size_t)N * M), y16(big);
  convert_to_bf16(x.get(), x16.get(), big, st);
  convert_to_bf16(w.get(), w16.get(), hw.size(), st);
  convert_to_bf16(bias.get(), b16.get(), 4 * D, st);
  convert_to_bf16(r.get(), r16.get(), (size_t)N * M, st);

  // kind 0: forward (bias; residual when res, output fp32 then in bf16 mode), 1: dW (+ db), 2: dX.
  struct G { const char* name; int kind; int m, n, k; bool res; };
  const std::vector<G> gemms = {
      {"fwd qkv", 0, N, 3 * D, D, false}, {"fwd proj", 0, N, D, D, true},
      {"fwd fc1", 0, N, M, D, false},     {"fwd fc2", 0, N, D, M, true},
      {"dW qkv", 1, N, 3 * D, D, false},  {"dW proj", 1, N, D, D, false},
      {"dW fc1", 1, N, M, D, false},      {"dW fc2", 1, N, D, M, false},
      {"dX qkv", 2, N, 3 * D, D, false},  {"dX proj", 2, N, D, D, false},
      {"dX fc1", 2, N, M, D, false},      {"dX fc2", 2, N, D, M, false},
  };
  const Precision precs[3] = {Precision::fp32, Precision::tf32, Precision::bf16};
  double block_total[3] = {0, 0, 0};
  std::printf("\n| GEMM | m x n x k | fp32 ms (TF/s) | tf32 ms (TF/s) | bf16 ms (TF/s) |\n| --- | --- | --- | --- | --- |\n");
  for (const G& g : gemms) {
    std::printf("| %s | %d x %d x %d |", g.name, g.m, g.n, g.k);
    for (int c = 0; c < 3; ++c) {
      LtGemmOptions o;
      o.compute = precs[c] == Precision::fp32   ? CUBLAS_COMPUTE_32F_PEDANTIC
                  : precs[c] == Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                : CUBLAS_COMPUTE_32F;
      o.autotune_candidates = 16;
      LtGemm lt(st, o);
      std::function<void()> fn;
      if (precs[c] != Precision::bf16) {
        if (g.kind == 0)
          fn = [&] { linear_forward(lt, x.get(), w.get(), bias.get(), g.res ? r.get() : nullptr, y.get(), g.m, g.n, g.k); };
        else if (g.kind == 1)
          fn = [&] { linear_backward_weight_bias(lt, x.get(), r.get(), y.get(), y2.get(), g.m, g.n, g.k); };
        else
          fn = [&] { linear_backward_input(lt, x.get(), w.get(), y.get(), g.m, g.n, g.k); };
      } else {
        if (g.kind == 0 && g.res)  // proj, fc2: fp32 residual stream
          fn = [&] { linear_forward(lt, x16.get(), w16.get(), bias.get(), r.get(), y.get(), g.m, g.n, g.k); };
        else if (g.kind == 0)  // qkv, fc1: bf16 out
          fn = [&] { linear_forward(lt, x16.get(), w16.get(), b16.get(), nullptr, y16.get(), g.m, g.n, g.k); };
        else if (g.kind == 1)
          fn = [&] {
            if (!linear_backward_weight_bias(lt, x16.get(), r16.get(), y.get(), y2.get(), g.m, g.n, g.k))
              linear_backward_weight(lt, x16.get(), r16.get(), y.get(), g.m, g.n, g.k, false);
          };
        else
          fn = [&] { linear_backward_input(lt, x16.get(), w16.get(), y16.get(), g.m, g.n, g.k); };
      }
      const double ms = time_ms(st, fn);
      block_total[c] += ms;
      std::printf(" %.3f (%.0f) |", ms, 2.0 * g.m * g.n * g.k / (ms * 1e-3) / 1e12);
    }
    std::printf("\n");
  }
  for (int c = 0; c < 3; ++c)
    std::printf("GEMMs of one block (fwd + bwd), %s: %.3f ms, x24 = %.2f ms\n", precision_name(precs[c]),
                block_total[c], 24 * block_total[c]);

  // bf16 design choices, measured: output type of the GEMMs (fp32 vs bf16 D), BGRADB availability.
  {
    LtGemmOptions o;
    o.compute = CUBLAS_COMPUTE_32F;
    o.autotune_candidates = 16;
    LtGemm lt(st, o);
    const GemmTypes to32{CUDA_R_16BF, CUDA_R_32F}, to16{CUDA_R_16BF, CUDA_R_16BF};
    DevVec<float> cs_scratch(column_sum_scratch_floats(N, M));
    std::printf("\n| bf16 GEMM variant | D fp32 ms | D bf16 ms |\n| --- | --- | --- |\n");
    for (const G& g : gemms) {
      if (g.kind == 1) continue;
      // Forward: Y = X W^T + b (+ R); input gradient: dX = dY W. Same shapes, only D's type differs.
      const bool fwd = g.kind == 0;
      const int m = g.m, n = fwd ? g.n : g.k, k = fwd ? g.k : g.n;
      auto run = [&](const GemmTypes& t, void* out, const void* b, const void* res) {
        return time_ms(st, [&] {
          lt.gemm(t, false, fwd, m, n, k, 1.0f, x16.get(), k, w16.get(), fwd ? k : n, res ? 1.0f : 0.0f, res, n,
                  out, n, b);
        });
      };
      const double f32 = run(to32, y.get(), fwd ? bias.get() : nullptr, g.res ? r.get() : nullptr);
      const double f16 = run(to16, y16.get(), fwd ? static_cast<const void*>(b16.get()) : nullptr,
                             g.res ? static_cast<const void*>(r16.get()) : nullptr);
      std::printf("| %s%s | %.3f | %.3f |\n", g.name, g.res ? " (+ residual)" : "", f32, f16);
    }
    for (const G& g : gemms) {
      if (g.kind != 1) continue;
      const double plain = time_ms(st, [&] { linear_backward_weight(lt, x16.get(), r16.get(), y.get(), g.m, g.n, g.k, false); });
      const bool fused_ok = linear_backward_weight_bias(lt, x16.get(), r16.get(), y.get(), y2.get(), g.m, g.n, g.k);
      const double fused = fused_ok ? time_ms(st, [&] {
        linear_backward_weight_bias(lt, x16.get(), r16.get(), y.get(), y2.get(), g.m, g.n, g.k);
      }) : -1;
      const double colsum = time_ms(st, [&] {
        column_sum(x16.get(), g.m, g.n, g.n, y2.get(), false, cs_scratch.get(), st);
      });
      if (fused_ok)
        std::printf("%-8s bf16 dW %.3f ms, dW+BGRADB %.3f ms, separate bf16 column_sum %.3f ms\n", g.name, plain, fused, colsum);
      else
        std::printf("%-8s bf16 dW %.3f ms, BGRADB not offered for bf16 -> fp32 (column_sum %.3f ms instead)\n", g.name,
                    plain, colsum);
    }
  }

  // bf16 custom kernels of one block (per-block multiplicity in brackets).
  DevVec<float> mean(N), rstd(N), dxf(hbig.size() / 2),
      scratch(std::max(layernorm_backward_scratch_floats(N, D), column_sum_scratch_floats(N, M)));
  DevVec<float> probs((size_t)B * H * T * T), ds(attention_backward_scratch_floats(B, T, H, D / H));
  double custom = 0;
  std::printf("\n| bf16 kernel | ms | per block |\n| --- | --- | --- |\n");
  auto report = [&](const char* name, double ms, int per_block) {
    custom += ms * per_block;
    std::printf("| %s | %.4f | x%d |\n", name, ms, per_block);
  };
  report("layernorm_forward (bf16 out)", time_ms(st, [&] {
    layernorm_forward(x.get(), D, w.get(), bias.get(), y16.get(), D, mean.get(), rstd.get(), N, D, 1e-6f, st);
  }), 2);
  report("layernorm_backward (bf16 dy, + bf16 dx copy)", time_ms(st, [&] {
    layernorm_backward(r16.get(), D, x.get(), D, mean.get(), rstd.get(), w.get(), dxf.get(), D, true,
                       y2.get(), y2.get() + D, false, N, D, scratch.get(), st, y16.get());
  }), 2);
  report("attention_forward", time_ms(st, [&] {
    attention_forward(x16.get(), probs.get(), y16.get(), B, T, H, D / H, st);
  }), 1);
  report("attention_backward", time_ms(st, [&] {
    attention_backward(x16.get(), probs.get(), r16.get(), y16.get(), ds.get(), B, T, H, D / H, st);
  }), 1);
  report("gelu_forward", time_ms(st, [&] { gelu_forward(x16.get(), y16.get(), (size_t)N * M, st); }), 1);
  report("gelu_backward", time_ms(st, [&] { gelu_backward(r16.get(), x16.get(), y16.get(), (size_t)N * M, st); }), 1);
  std::printf("bf16 custom kernels of one block: %.3f ms, x24 = %.2f ms\n", custom, 24 * custom);
  {
    const size_t n = 306535400;  // vit_l_32 parameters
    DevVec<float> p(n);
    DevVec<bf16> p16(n);
    CUDA_CHECK(cudaMemsetAsync(p.get(), 0, n * sizeof(float), st));
    const double ms = time_ms(st, [&] { convert_to_bf16(p.get(), p16.get(), n, st); }, 10);
    std::printf("convert_to_bf16 of the %zu vit_l_32 parameters (once per forward): %.3f ms (%.0f GB/s)\n", n, ms,
                n * 6.0 / (ms * 1e-3) / 1e9);
  }
  std::printf("column_sum bf16 N x M (only when BGRADB is not used): %.4f ms\n", time_ms(st, [&] {
    column_sum(x16.get(), N, M, M, y2.get(), false, scratch.get(), st);
  }));
  cudaStreamDestroy(st);
}

TEST_CASE("bench: each GEMM of a vit_l_32 batch-32 step inside the step and alone", "[.bench][gemm_calls]") {
  REQUIRE_GPU();
  const ParamLayout L = make_param_layout(vit_config("vit_l_32"));
  const int B = 32, warmup = 5, steps = 5;
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  StepInputs in(L, B);
  for (const Precision prec : {Precision::tf32, Precision::bf16}) {
    in.params.upload(in.host_params);
    GpuViTOptions o = GpuViTOptions::for_precision(prec);
    GpuViT gpu(L, B, st, o);
    auto step = [&] {
      gpu.forward(in.params.get(), in.images.get(), in.labels.get(), B, in.loss.get());
      gpu.backward(in.params.get(), in.grads.get(), false, {});
    };
    for (int i = 0; i < warmup; ++i) step();  // the first builds and autotunes every plan
    gpu.set_gemm_timing(true);
    struct Group {
      std::vector<double> ms;
      double tuned_ms, first_ms;
    };
    std::map<std::pair<std::string, std::string>, Group> groups;  // (shape, algorithm) -> calls
    double total = 0;
    for (int i = 0; i < steps; ++i) {
      step();
      for (const TimedGemm& g : gpu.take_gemm_calls()) {
        Group& grp = groups[{g.shape, g.algo}];
        grp.ms.push_back(g.ms);
        grp.tuned_ms = g.tuned_ms;
        grp.first_ms = g.first_ms;
        total += g.ms;
      }
    }
    gpu.set_gemm_timing(false);
    std::vector<std::tuple<double, std::string, std::string, const Group*>> rows;  // ms per step first
    for (const auto& [key, grp] : groups) {
      double sum = 0;
      for (double v : grp.ms) sum += v;
      rows.emplace_back(sum / steps, key.first, key.second, &grp);
    }
    std::sort(rows.rbegin(), rows.rend());
    double alone = 0;  // the same calls at their autotuned times
    std::printf(
        "\nvit_l_32, batch 32, %s, eager, one stream: %d steps after %d warm-up steps; us per call "
        "(median inside the step; autotuned alone: the kept candidate, and the heuristic's first)\n",
        precision_name(prec), steps, warmup);
    std::printf(
        "| GEMM | cuBLASLt algorithm | calls/step | in step us | alone us | first candidate us | in step / alone | "
        "ms/step |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const auto& [ms_step, shape, algo, grp] : rows) {
      const double calls = (double)grp->ms.size() / steps, in_step = median(grp->ms) * 1e3;
      const double tuned = grp->tuned_ms * 1e3, first = grp->first_ms * 1e3;
      if (grp->tuned_ms > 0) alone += grp->tuned_ms * grp->ms.size() / steps;
      std::printf("| %s | %s | %.0f | %.1f | %.1f | %.1f | %.2f | %.3f |\n", shape.c_str(), algo.c_str(), calls,
                  in_step, tuned, first, grp->tuned_ms > 0 ? in_step / tuned : 0.0, ms_step);
      CHECK(grp->tuned_ms > 0);  // vitddp autotunes every GEMM of the step
    }
    std::printf("GEMMs: %.3f ms a step inside it, %.3f ms at their autotuned times alone\n", total / steps, alone);
    CHECK(total > 0);
  }
  cudaStreamDestroy(st);
}
