// Hidden benchmark [.bench][overlap_bench]: why backward slows down while the gradient
// all-reduce overlaps it. On one GPU, vit_l_32 batch-32 backward (bf16 and tf32) runs on its
// stream while a second, high-priority stream carries a synthetic load that starts with backward:
//  - spin k: k thread blocks that only spin on the SM clock (they hold k SMs, move no data),
//    with and without the GEMM SM carveout (GpuViTOptions::backward_sm_carveout = k);
//  - SM copy k: k thread blocks copying a 1.2 GB buffer (SMs + HBM traffic, as NCCL's kernels);
//  - CE copy: cudaMemcpyAsync device-to-device of 1.2 GB (HBM traffic, no kernel).
// Printed: median backward time of 20 steps per load, the slowdown against no load, and with
// per-GEMM events (a second pass) the GEMM and non-GEMM parts of backward.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cuda/kernels/event_pair.h"
#include "cuda/model/gpu_vit.h"
#include "model/init.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;

namespace {

// Spins until `cycles` SM clock cycles have passed; one thread block per SM it holds.
__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// `passes` grid-stride copies of n float4 values: HBM traffic from `gridDim.x` blocks.
__global__ void copy_kernel(const float4* __restrict__ src, float4* __restrict__ dst, size_t n, int passes) {
  for (int p = 0; p < passes; ++p)
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
      dst[i] = src[i];
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Load {
  std::string name;
  int carveout;  // GEMM SM carveout of the model under this load
  std::function<void(cudaStream_t)> start;  // enqueues the load on the side stream
};

}  // namespace

TEST_CASE("bench: backward under a concurrent load on another stream", "[.bench][overlap_bench]") {
  REQUIRE_GPU();
  const ParamLayout L = make_param_layout(vit_config("vit_l_32"));
  const int B = 32, warmup = 5, iters = 20;
  int dev = 0, clock_khz = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  const long long spin_cycles = (long long)clock_khz * 12;  // about 12 ms at the base clock: longer than backward
  int lo = 0, hi = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaStream_t st, side;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, hi));
  StepInputs in(L, B);
  DevVec<float>& dp = in.params, &dg = in.grads, &dimg = in.images, &dloss = in.loss;
  DevVec<int32_t>& dlab = in.labels;
  const size_t copy_floats = L.total;  // the gradients' size, 1.23 GB
  DevVec<float> src(copy_floats), dst(copy_floats);
  const size_t n4 = copy_floats / 4;

  std::vector<Load> loads = {{"none", 0, [](cudaStream_t) {}}};
  for (int k : {2, 8, 24}) {
    loads.push_back({"spin " + std::to_string(k) + " blocks", 0,
                     [=](cudaStream_t s) { spin_kernel<<<k, 128, 0, s>>>(spin_cycles); }});
    loads.push_back({"spin " + std::to_string(k) + " blocks, carveout " + std::to_string(k), k,
                     [=](cudaStream_t s) { spin_kernel<<<k, 128, 0, s>>>(spin_cycles); }});
  }
  for (int k : {8, 24})
    loads.push_back({"SM copy " + std::to_string(k) + " blocks", 0, [=, &src, &dst](cudaStream_t s) {
                       copy_kernel<<<k, 512, 0, s>>>(reinterpret_cast<const float4*>(src.get()),
                                                     reinterpret_cast<float4*>(dst.get()), n4, 1);
                     }});
  loads.push_back({"CE copy 1.2 GB", 0, [&](cudaStream_t s) {
                     CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), copy_floats * sizeof(float),
                                                cudaMemcpyDeviceToDevice, s));
                   }});

  EventPair ev;
  cudaEvent_t fwd_done;
  CUDA_CHECK(cudaEventCreateWithFlags(&fwd_done, cudaEventDisableTiming));
  std::printf("\nvit_l_32 batch 32 backward on one GPU while another stream runs a load that starts with it "
              "(medians of %d steps)\n", iters);
  std::printf("| precision | load | backward ms | slowdown ms | GEMM ms (events) | non-GEMM ms |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const Precision prec : {Precision::bf16, Precision::tf32}) {
    double base = 0;
    for (const Load& load : loads) {
      GpuViTOptions o = GpuViTOptions::for_precision(prec);
      o.attention = prec == Precision::bf16 ? AttentionImpl::cudnn : AttentionImpl::custom;
      o.backward_sm_carveout = load.carveout;
      GpuViT gpu(L, B, st, o);
      auto step = [&](bool timed) {
        gpu.forward(dp.get(), dimg.get(), dlab.get(), B, dloss.get());
        CUDA_CHECK(cudaEventRecord(fwd_done, st));
        CUDA_CHECK(cudaStreamWaitEvent(side, fwd_done, 0));
        load.start(side);
        if (timed) ev.record_start(st);
        gpu.backward(dp.get(), dg.get(), false, {});
        if (timed) ev.record_stop(st);
        CUDA_CHECK(cudaStreamSynchronize(side));
        CUDA_CHECK(cudaStreamSynchronize(st));
      };
      for (int i = 0; i < warmup; ++i) step(false);
      std::vector<double> bwd, gemm;
      for (int i = 0; i < iters; ++i) {
        step(true);
        bwd.push_back(ev.elapsed_ms());
      }
      // Second pass with events around every GEMM: backward's GEMM time (forward's dropped).
      std::vector<double> gemm_bwd;
      gpu.set_gemm_timing(true);
      for (int i = 0; i < iters; ++i) {
        gpu.forward(dp.get(), dimg.get(), dlab.get(), B, dloss.get());
        gpu.take_gemm_ms();
        CUDA_CHECK(cudaEventRecord(fwd_done, st));
        CUDA_CHECK(cudaStreamWaitEvent(side, fwd_done, 0));
        load.start(side);
        ev.record_start(st);
        gpu.backward(dp.get(), dg.get(), false, {});
        ev.record_stop(st);
        CUDA_CHECK(cudaStreamSynchronize(st));
        gemm_bwd.push_back(gpu.take_gemm_ms());
        gemm.push_back(ev.elapsed_ms());
        CUDA_CHECK(cudaStreamSynchronize(side));
      }
      gpu.set_gemm_timing(false);
      const double b = median_of(bwd), g = median_of(gemm_bwd), bt = median_of(gemm);
      if (load.name == "none") base = b;
      std::printf("| %s | %s | %.2f | %+.2f | %.2f | %.2f |\n", precision_name(prec), load.name.c_str(), b, b - base, g,
                  bt - g);
      CHECK(b > 0);
    }
  }
  cudaEventDestroy(fwd_done);
  cudaStreamDestroy(st);
  cudaStreamDestroy(side);
}
