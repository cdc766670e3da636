// Hidden benchmark ([.bench]): per-operation times at the vit_l_32, batch-32 shapes, for the
// cuBLASLt GEMM configurations (heuristic choice, autotuned, pedantic) and the custom kernels.
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cuda/kernels/attention.h"
#include "cuda/kernels/gelu.h"
#include "cuda/kernels/layernorm.h"
#include "cuda/kernels/lt_gemm.h"
#include "cuda/kernels/reduce.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;

TEST_CASE("bench: per-operation times at vit_l_32 batch-32 shapes", "[.bench]") {
  REQUIRE_GPU();
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const int B = 32, T = 50, D = 1024, M = 4096, H = 16, N = B * T;
  const size_t big = (size_t)N * M * 2;
  DevVec<float> x(normal_vec(big, 1, 0)), w(normal_vec((size_t)M * 3 * D / 2, 1, 1)),
      bias(normal_vec(4 * D, 1, 2)), r(normal_vec((size_t)N * M, 1, 3)), y(big), y2(big);

  struct G { const char* name; int kind; int m, n, k; bool bias, res; };  // kind 0 fwd, 1 dW, 2 dX
  const std::vector<G> gemms = {
      {"fwd qkv", 0, N, 3 * D, D, true, false},  {"fwd proj", 0, N, D, D, true, true},
      {"fwd fc1", 0, N, M, D, true, false},      {"fwd fc2", 0, N, D, M, true, true},
      {"dW qkv", 1, N, 3 * D, D, false, false},  {"dW proj", 1, N, D, D, false, false},
      {"dW fc1", 1, N, M, D, false, false},      {"dW fc2", 1, N, D, M, false, false},
      {"dX qkv", 2, N, 3 * D, D, false, false},  {"dX proj", 2, N, D, D, false, false},
      {"dX fc1", 2, N, M, D, false, false},      {"dX fc2", 2, N, D, M, false, false},
  };
  struct Cfg { const char* name; LtGemmOptions o; };
  std::vector<Cfg> cfgs(3);
  cfgs[0].name = "heuristic";
  cfgs[1].name = "autotune16";
  cfgs[1].o.autotune_candidates = 16;
  cfgs[2].name = "pedantic";
  cfgs[2].o.compute = CUBLAS_COMPUTE_32F_PEDANTIC;
  std::vector<double> layer_total(cfgs.size(), 0.0);
  for (const G& g : gemms) {
    std::printf("%-9s m=%5d n=%5d k=%5d:", g.name, g.m, g.n, g.k);
    for (size_t c = 0; c < cfgs.size(); ++c) {
      LtGemm lt(st, cfgs[c].o);
      auto fn = [&]() {
        if (g.kind == 0)
          linear_forward(lt, x.get(), w.get(), g.bias ? bias.get() : nullptr, g.res ? r.get() : nullptr,
                         y.get(), g.m, g.n, g.k);
        else if (g.kind == 1)
          linear_backward_weight(lt, x.get(), r.get(), y.get(), g.m, g.n, g.k, false);
        else
          linear_backward_input(lt, x.get(), w.get(), y.get(), g.m, g.n, g.k);
      };
      const double ms = time_ms(st, fn);
      layer_total[c] += ms;
      std::printf("  %s %.3f ms (%.1f TF/s)", cfgs[c].name, ms, 2.0 * g.m * g.n * g.k / (ms * 1e-3) / 1e12);
    }
    std::printf("\n");
  }
  for (size_t c = 0; c < cfgs.size(); ++c)
    std::printf("GEMMs of one block (fwd+bwd), %s: %.3f ms, x24 = %.1f ms\n", cfgs[c].name,
                layer_total[c], 24 * layer_total[c]);

  // Forward-GEMM layouts: Y = X W^T (TN, as used) with and without the bias epilogue, and
  // Y = X Wt with a pre-transposed weight (NN).
  for (const G& g : gemms) {
    if (g.kind != 0) continue;
    LtGemm lt(st);
    const double tn_bias = time_ms(st, [&] {
      lt.gemm(false, true, g.m, g.n, g.k, 1, x.get(), g.k, w.get(), g.k, 0, nullptr, g.n, y.get(), g.n, bias.get());
    });
    const double tn = time_ms(st, [&] {
      lt.gemm(false, true, g.m, g.n, g.k, 1, x.get(), g.k, w.get(), g.k, 0, nullptr, g.n, y.get(), g.n);
    });
    const double nn = time_ms(st, [&] {
      lt.gemm(false, false, g.m, g.n, g.k, 1, x.get(), g.k, w.get(), g.n, 0, nullptr, g.n, y.get(), g.n);
    });
    const double nn_bias = time_ms(st, [&] {
      lt.gemm(false, false, g.m, g.n, g.k, 1, x.get(), g.k, w.get(), g.n, 0, nullptr, g.n, y.get(), g.n, bias.get());
    });
    std::printf("%-9s TN+bias %.3f  TN %.3f  NN %.3f  NN+bias %.3f ms\n", g.name, tn_bias, tn, nn, nn_bias);
  }

  // Weight-gradient GEMMs with the bias gradient fused (BGRADB epilogue) vs plain.
  for (const G& g : gemms) {
    if (g.kind != 1) continue;
    LtGemm lt(st);
    const double plain = time_ms(st, [&] { linear_backward_weight(lt, x.get(), r.get(), y.get(), g.m, g.n, g.k, false); });
    try {
      const double fused = time_ms(st, [&] {
        lt.gemm(true, false, g.n, g.k, g.m, 1, x.get(), g.n, r.get(), g.k, 0, nullptr, g.k, y.get(), g.k, nullptr, y2.get());
      });
      std::printf("%-9s dW %.3f ms, dW+BGRADB %.3f ms\n", g.name, plain, fused);
    } catch (const std::exception& e) {
      std::printf("%-9s dW %.3f ms, dW+BGRADB failed: %s\n", g.name, plain, e.what());
    }
  }

  // Custom kernels.
  DevVec<float> mean(N), rstd(N),
      scratch(
          std::max<size_t>(layernorm_backward_scratch_floats(N, D),
                           std::max(column_sum_scratch_floats(N, M), gelu_backward_bias_scratch_floats(N, M, false))));
  DevVec<float> probs((size_t)B * H * T * T), ds(attention_backward_scratch_floats(B, T, H, D / H));
  double custom = 0;
  auto report = [&](const char* name, double ms, int per_block) {
    custom += ms * per_block;
    if (per_block > 0) std::printf("%-28s %.4f ms (x%d per block)\n", name, ms, per_block);
    else std::printf("%-28s %.4f ms (fused alternative, not in the total)\n", name, ms);
  };
  report("layernorm_forward", time_ms(st, [&] {
    layernorm_forward(x.get(), D, w.get(), bias.get(), y.get(), D, mean.get(), rstd.get(), N, D, 1e-6f, st);
  }), 2);
  report("layernorm_backward", time_ms(st, [&] {
    layernorm_backward(r.get(), D, x.get(), D, mean.get(), rstd.get(), w.get(), y.get(), D, true,
                       y2.get(), y2.get() + D, false, N, D, scratch.get(), st);
  }), 2);
  report("layernorm_backward+colsum", time_ms(st, [&] {
    layernorm_backward(r.get(), D, x.get(), D, mean.get(), rstd.get(), w.get(), y.get(), D, true,
                       y2.get(), y2.get() + D, false, N, D, scratch.get(), st, nullptr, y2.get() + 2 * D);
  }), 0);
  report("attention_forward", time_ms(st, [&] {
    attention_forward(x.get(), probs.get(), y.get(), B, T, H, D / H, st);
  }), 1);
  report("attention_backward", time_ms(st, [&] {
    attention_backward(x.get(), probs.get(), r.get(), y.get(), ds.get(), B, T, H, D / H, st);
  }), 1);
  report("gelu_forward", time_ms(st, [&] { gelu_forward(x.get(), y.get(), (size_t)N * M, st); }), 1);
  report("gelu_backward", time_ms(st, [&] { gelu_backward(r.get(), x.get(), y.get(), (size_t)N * M, st); }), 1);
  report("gelu_backward_bias", time_ms(st, [&] {
    gelu_backward_bias(r.get(), x.get(), y.get(), N, M, y2.get(), false, scratch.get(), st);
  }), 0);
  report("column_sum N x D", time_ms(st, [&] { column_sum(x.get(), N, D, D, y2.get(), false, scratch.get(), st); }), 2);
  report("column_sum N x 3D", time_ms(st, [&] { column_sum(x.get(), N, 3 * D, 3 * D, y2.get(), false, scratch.get(), st); }), 1);
  report("column_sum N x M", time_ms(st, [&] { column_sum(x.get(), N, M, M, y2.get(), false, scratch.get(), st); }), 1);
  std::printf("custom kernels of one block: %.3f ms, x24 = %.1f ms\n", custom, 24 * custom);
  cudaStreamDestroy(st);
}
