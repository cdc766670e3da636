// Compression comm hooks in the NCCL reducer on 2 GPUs (`mpirun -np 2`): averaging for every
// compression and both bucket modes, fp16 overflow, bf16 rounding, PowerSGD on the GPU against
// the host implementation on the same inputs, bucket copy mode == bucket view mode.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda/check/check_cuda.h"
#include "cuda/model/device_buffer.h"
#include "model/param_layout.h"
#include "model/rng.h"
#include "mpi/hooks/half_host.h"
#include "mpi/world/nccl_comm_gpu.h"
#include "mpi/hooks/powersgd_host.h"
#include "mpi/reducer/gpu_reducer_gpu.h"
#include "mpi/world/world.h"
#include "tests/catch.h"
#include "tests/gpu_mpi/gpu_mpi_test_util.h"
#include "tests/test_util.h"

using namespace vitddp;
using vitddp_test::norm_rel_err;
using vitddp_test::test_world;
using vitddp_test::two_rank_16bit_average;

namespace {

/// Device gradients, a compute stream and a step-start event: one replica's side of a test.
struct Replica {
  explicit Replica(size_t n) : grads(n, "gradients") {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&start));
  }
  ~Replica() {
    cudaStreamSynchronize(stream);
    cudaEventDestroy(start);
    cudaStreamDestroy(stream);
  }
  void set(const std::vector<float>& h) {
    CUDA_CHECK(cudaMemcpy(grads.get(), h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  std::vector<float> get() const {
    std::vector<float> h(grads.size());
    CUDA_CHECK(cudaMemcpy(h.data(), grads.get(), h.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  }
  /// One step of `r`: every parameter ready in gradient-ready order, then finalize and wait.
  BucketTimes step(GpuReducer& r, const ParamLayout& L) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    r.prepare_for_backward();
    for (size_t p : L.ready_order()) r.mark_ready({p});
    r.finalize();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return r.times(start);
  }
  DeviceBuffer<float> grads;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
};

ReducerOptions options(const std::string& c, bool view, int64_t powersgd_start = 0, int rank = 1) {
  ReducerOptions o;
  o.compression = c;
  o.grad_as_bucket_view = view;
  o.powersgd.start_iter = powersgd_start;
  o.powersgd.rank = rank;
  return o;
}

const std::string kAll[] = {"none", "fp16", "bf16", "powersgd"};

}  // namespace

TEST_CASE("NCCL comm hooks average every bucket: rank r holds r+1", "[gpu][mpi][comm_hooks]") {
  const World w = test_world();
  REQUIRE(w.world_size == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  const auto B = assign_buckets(L, 4096, 65536);
  REQUIRE(B.size() > 3);
  NcclComm comm(w);
  Replica rep(L.total);
  for (const std::string& c : kAll)
    for (bool view : {true, false}) {
      INFO(c << (view ? ", bucket view" : ", bucket copy"));
      rep.set(std::vector<float>(L.total, (float)(w.rank + 1)));
      GpuReducer reducer(L, B, rep.grads.get(), comm.get(), rep.stream, options(c, view));
      const BucketTimes t = rep.step(reducer, L);
      const auto out = rep.get();
      size_t wrong = 0;
      for (const auto& p : L.params)
        for (size_t i = p.offset; i < p.offset + p.numel; ++i)
          wrong += c == "powersgd" ? std::abs(out[i] - 1.5f) > 1e-5f : out[i] != 1.5f;
      CHECK(wrong == 0u);
      REQUIRE(t.bytes_sent.size() == B.size());
      const auto HB = hook_buckets(L, B);
      for (size_t b = 0; b < B.size(); ++b) {
        const auto plan = make_powersgd_plan(HB[b], 1, 2.0);
        const uint64_t want = c == "none"       ? 4ull * B[b].numel
                              : c == "powersgd" ? plan.bytes_per_step()
                                                           : 2ull * B[b].numel;
        CHECK(t.bytes_sent[b] == want);
        CHECK(t.compressed[b] == (c == "none" ? 0 : 1));
        CHECK(t.end_ms[b] >= t.start_ms[b]);
        CHECK(t.allreduce_ms[b] > 0);
        CHECK(t.compress_ms[b] >= 0);
        if (c == "none") CHECK(t.compress_ms[b] == 0);
        if (view) CHECK(t.copy_ms[b] == 0);
        else CHECK(t.copy_ms[b] >= 0);
      }
      if (c == "powersgd") CHECK(reducer.powersgd()->iteration() == 1);
    }
}

TEST_CASE("NCCL fp16: two ranks holding 40000 give 40000, not inf", "[gpu][mpi][comm_hooks]") {
  const World w = test_world();
  REQUIRE(w.world_size == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const auto B = assign_buckets(L, 1024, 4096);
  NcclComm comm(w);
  Replica rep(L.total);
  rep.set(std::vector<float>(L.total, 40000.0f));  // 80000 > 65504 = fp16 max if not divided first
  GpuReducer reducer(L, B, rep.grads.get(), comm.get(), rep.stream, options("fp16", true));
  rep.step(reducer, L);
  const auto out = rep.get();
  size_t wrong = 0;
  for (float v : out) wrong += v != 40000.0f;
  CHECK(wrong == 0u);
}

TEST_CASE("NCCL bf16 all-reduce rounds like the host emulation", "[gpu][mpi][comm_hooks]") {
  const World w = test_world();
  REQUIRE(w.world_size == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const auto B = assign_buckets(L, 1024, 4096);
  // The values of tests/mpi/test_comm_hooks_mpi.cpp: 3k -> 1.0 (tie to even after the add),
  // 3k+1 -> 1.5 (inputs rounded before the add), 3k+2 random.
  std::vector<float> a(L.total), b(L.total), mine(L.total);
  for (size_t i = 0; i < L.total; ++i) {
    switch (i % 3) {
      case 0: a[i] = 2.0f; b[i] = 1.0f / 128; break;
      case 1: a[i] = 2.0f * (1.0f + 0.4f / 128); b[i] = 2.0f * (0.5f + 0.4f / 256); break;
      default: a[i] = (float)rand_normal(5, 0, i); b[i] = (float)rand_normal(5, 1, i); break;
    }
    mine[i] = w.rank == 0 ? a[i] : b[i];
  }
  for (const std::string c : {"bf16", "fp16"}) {
    INFO(c);
    NcclComm comm(w);
    Replica rep(L.total);
    rep.set(mine);
    GpuReducer reducer(L, B, rep.grads.get(), comm.get(), rep.stream, options(c, true));
    rep.step(reducer, L);
    const auto out = rep.get();
    size_t wrong = 0;
    for (size_t i = 0; i < L.total; ++i) {
      const float want = two_rank_16bit_average(c, a[i], b[i]);
      if (c == "bf16") {
        if (i % 3 == 0) CHECK(want == 1.0f);
        if (i % 3 == 1) CHECK(want == 1.5f);
      }
      wrong += out[i] != want;
    }
    CHECK(wrong == 0u);
  }
}

TEST_CASE("PowerSGD on the GPU matches the host implementation on the same inputs", "[gpu][mpi][powersgd]") {
  const World w = test_world();
  REQUIRE(w.world_size == 2);
  ViTConfig cfg = vit_config("vit_b_32");
  cfg.layers = 2;  // vit_b_32-sized matrices (768x768 ... 3072x768, conv 768x3072), fewer layers
  struct Case {
    const char* name;
    ParamLayout L;
    std::vector<Bucket> B;
    int rank;
  };
  const ParamLayout big = make_param_layout(cfg), tiny = make_param_layout(vit_config("vit_tiny"));
  const std::vector<Case> cases = {
      {"vit_b_32 x 2 layers, 25 MiB buckets, rank 1", big, assign_buckets(big, 1 << 20, 25 << 20), 1},
      {"vit_b_32 x 2 layers, 25 MiB buckets, rank 2", big, assign_buckets(big, 1 << 20, 25 << 20), 2},
      {"vit_tiny, small buckets, rank 4", tiny, assign_buckets(tiny, 4096, 65536), 4},
  };
  NcclComm comm(w);
  for (const Case& k : cases) {
    INFO(k.name);
    const ParamLayout& L = k.L;
    Replica rep(L.total);
    const ReducerOptions opts = options("powersgd", true, 1, k.rank);  // step 0 plain, 1..3 compressed
    GpuReducer reducer(L, k.B, rep.grads.get(), comm.get(), rep.stream, opts);
    PowerSgdHost host(hook_buckets(L, k.B), opts.powersgd, 2);
    const auto host_allreduce = [](float* x, size_t n) {
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    };
    for (int s = 0; s < 4; ++s) {
      INFO("step " << s);
      std::vector<float> in(L.total, 0.0f);
      for (const auto& p : L.params)
        for (size_t i = p.offset; i < p.offset + p.numel; ++i) in[i] = (float)rand_normal(41 + w.rank, s, i);
      rep.set(in);
      const BucketTimes t = rep.step(reducer, L);
      const auto gpu = rep.get();
      std::vector<float> ref = in;
      for (size_t b = 0; b < k.B.size(); ++b) host.run_bucket(b, ref.data() + k.B[b].offset, host_allreduce);
      host.end_step();
      double worst = 0;
      for (const auto& p : L.params) {
        const double e = norm_rel_err(gpu.data() + p.offset, ref.data() + p.offset, p.numel);
        worst = std::max(worst, e);
        INFO(p.name);
        CHECK(e <= 1e-4);
      }
      for (size_t b = 0; b < k.B.size(); ++b) {
        CHECK(t.compressed[b] == (s >= 1 && host.plan(b).compressed_count > 0 ? 1 : 0));
        if (s >= 1) {
          CHECK(t.bytes_sent[b] == host.plan(b).bytes_per_step());
          const auto err = reducer.powersgd()->error_to_host(b);
          // The error is the local residual: compare against the host's, relative to the input.
          const auto& herr = host.error(b);
          REQUIRE(err.size() == herr.size());
          double num = 0, den = 0;
          for (size_t i = 0; i < err.size(); ++i) {
            num += ((double)err[i] - herr[i]) * ((double)err[i] - herr[i]);
            den += (double)in[k.B[b].offset + i] * in[k.B[b].offset + i];
          }
          CHECK(std::sqrt(num / std::max(den, 1e-300)) <= 1e-4);
        }
      }
      CHECK(reducer.powersgd()->iteration() == s + 1);
      if (w.rank == 0) std::printf("PowerSGD GPU vs host, %s, step %d: worst norm-relative error %.3g\n", k.name, s, worst);
    }
  }
}

TEST_CASE("NCCL bucket copy mode gives the same gradients as bucket view mode", "[gpu][mpi][comm_hooks]") {
  const World w = test_world();
  REQUIRE(w.world_size == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  const auto B = assign_buckets(L, 4096, 65536);
  NcclComm comm(w);
  for (const std::string& c : kAll) {
    INFO(c);
    Replica rv(L.total), rc(L.total);
    GpuReducer view(L, B, rv.grads.get(), comm.get(), rv.stream, options(c, true, 1));
    GpuReducer copy(L, B, rc.grads.get(), comm.get(), rc.stream, options(c, false, 1));
    for (int s = 0; s < 3; ++s) {
      std::vector<float> in(L.total);
      for (size_t i = 0; i < L.total; ++i) in[i] = (float)rand_normal(51 + w.rank, s, i);
      rv.set(in);
      rc.set(in);
      rv.step(view, L);
      const BucketTimes t = rc.step(copy, L);
      const auto a = rv.get(), b = rc.get();
      size_t diff = 0;
      for (size_t i = 0; i < L.total; ++i) diff += a[i] != b[i];
      INFO("step " << s);
      CHECK(diff == 0u);
      for (size_t k = 0; k < B.size(); ++k) CHECK(t.copy_ms[k] >= 0);
    }
  }
}
