// The GPU reducer (GpuReducer) on 2 GPUs (`mpirun -np 2`), with the NCCL and the copy-engine
// all-reduce: averaging and data-parallel equivalence.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <vector>

#include "cuda/check/check_cuda.h"
#include "cuda/model/device_buffer.h"
#include "cuda/model/gpu_vit.h"
#include "model/init.h"
#include "model/rng.h"
#include "mpi/world/nccl_comm_gpu.h"
#include "mpi/reducer/gpu_reducer_gpu.h"
#include "mpi/world/world.h"
#include "tests/catch.h"
#include "tests/gpu_mpi/gpu_mpi_test_util.h"
#include "tests/test_util.h"

using namespace vitddp;
using vitddp_test::norm_rel_err;
using vitddp_test::test_world;

namespace {

std::vector<float> to_host(const DeviceBuffer<float>& d) {
  std::vector<float> h(d.size());
  CUDA_CHECK(cudaMemcpy(h.data(), d.get(), d.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

TEST_CASE("GPU reducer (NCCL and copy-engine all-reduce) averages every bucket: rank r holds r+1", "[gpu][mpi][reducer]") {
  const bool overlap = GENERATE(true, false);  // --no-overlap launches every bucket in finalize()
  const std::string impl = GENERATE(std::string("nccl"), std::string("copy-engine"));
  // The copy engine on 1, 2 or 3 comm streams (buckets alternate over them).
  const int streams = impl == "copy-engine" ? GENERATE(1, 2, 3) : 1;
  // bf16 compression (a staging buffer per stream) averages 1 and 2 to 1.5 exactly too.
  const std::string comp = impl == "copy-engine" ? GENERATE(std::string("none"), std::string("bf16"))
                                                             : std::string("none");
  INFO("overlap " << overlap << ", copy-engine " << (impl == "copy-engine") << ", comm streams " << streams
                  << ", compression " << comp);
  const World w = test_world();
  REQUIRE(w.world_size == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_b_32"));
  const auto buckets = assign_buckets(L, 1 << 20, 25 << 20);
  DeviceBuffer<float> grads(L.total, "gradients");
  std::vector<float> host(L.total, (float)(w.rank + 1));
  CUDA_CHECK(cudaMemcpy(grads.get(), host.data(), L.total * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  NcclComm comm(w);
  {
    ReducerOptions ro;
    ro.overlap = overlap;
    ro.allreduce = impl;
    ro.comm_streams = streams;
    ro.compression = comp;
    GpuReducer reducer(L, buckets, grads.get(), comm.get(), stream, ro);
    cudaEvent_t start;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventRecord(start, stream));
    reducer.prepare_for_backward();
    for (size_t p : L.ready_order()) reducer.mark_ready({p});
    reducer.finalize();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto out = to_host(grads);
    size_t wrong = 0;
    for (float v : out) wrong += v != 1.5f;
    CHECK(wrong == 0u);
    const BucketTimes t = reducer.times(start);
    REQUIRE(t.start_ms.size() == buckets.size());
    for (size_t b = 0; b < buckets.size(); ++b) CHECK(t.end_ms[b] >= t.start_ms[b]);
    cudaEventDestroy(start);
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("2 GPUs with batch b equal 1 GPU with batch 2b", "[gpu][mpi][reducer]") {
  ReducerOptions ro;
  ro.allreduce = GENERATE(std::string("nccl"), std::string("copy-engine"));
  ro.comm_streams = ro.allreduce == "copy-engine" ? GENERATE(1, 2) : 1;
  INFO("copy-engine " << (ro.allreduce == "copy-engine") << ", comm streams " << ro.comm_streams);
  const World w = test_world();
  REQUIRE(w.world_size == 2);
  ViTConfig cfg = vit_config("vit_b_32");
  cfg.layers = 2;  // vit_b_32-sized layers, fewer of them
  const ParamLayout L = make_param_layout(cfg);
  const int b = 4;
  std::vector<float> params(L.total);
  init_params(L, InitScheme::Random, 5, params.data());
  const size_t img = (size_t)cfg.channels * cfg.image_size * cfg.image_size;
  std::vector<float> images(2 * b * img);
  std::vector<int32_t> labels(2 * b);
  for (size_t i = 0; i < images.size(); ++i) images[i] = (float)rand_normal(3, 0, i);
  for (int i = 0; i < 2 * b; ++i) labels[i] = (int32_t)(rand_bits(3, 1, i) % cfg.num_classes);

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer<float> d_params(L.total, "params"), d_ref(L.total, "reference grads"), d_grads(L.total, "grads");
  DeviceBuffer<float> d_images(images.size(), "images"), d_loss(1, "loss");
  DeviceBuffer<int32_t> d_labels(labels.size(), "labels");
  CUDA_CHECK(cudaMemcpy(d_params.get(), params.data(), L.total * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_images.get(), images.data(), images.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_labels.get(), labels.data(), labels.size() * 4, cudaMemcpyHostToDevice));

  // Reference on this GPU: the whole batch of 2b, no communication.
  GpuViT whole(L, 2 * b, stream);
  whole.forward(d_params.get(), d_images.get(), d_labels.get(), 2 * b, d_loss.get());
  whole.backward(d_params.get(), d_ref.get(), false, {});

  // Data parallel: rank r takes samples [r b, (r+1) b); the reducer runs inside backward.
  NcclComm comm(w);
  GpuReducer reducer(L, assign_buckets(L, 1 << 20, 25 << 20), d_grads.get(), comm.get(), stream, ro);
  GpuViT half(L, b, stream);
  half.forward(d_params.get(), d_images.get() + w.rank * b * img, d_labels.get() + w.rank * b, b, d_loss.get());
  reducer.prepare_for_backward();
  half.backward(d_params.get(), d_grads.get(), false, [&](const std::vector<size_t>& p) { reducer.mark_ready(p); });
  reducer.finalize();
  CUDA_CHECK(cudaStreamSynchronize(stream));

  const auto ref = to_host(d_ref), got = to_host(d_grads);
  double worst = 0;
  for (const auto& p : L.params) {
    const double e = norm_rel_err(got.data() + p.offset, ref.data() + p.offset, p.numel);
    worst = std::max(worst, e);
    INFO(p.name);
    CHECK(e <= 1e-5);
  }
  if (w.rank == 0) std::printf("data-parallel equivalence on 2 GPUs: worst norm-relative error %.3g\n", worst);
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("GPU transport registry: every name constructs and averages, an unknown one is refused", "[gpu][mpi][reducer]") {
  const World w = test_world();
  REQUIRE(w.world_size == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const auto buckets = assign_buckets(L, 1024, 4096);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  NcclComm comm(w);
  DeviceBuffer<float> grads(L.total, "grads");
  for (const GpuTransportEntry& e : gpu_transport_registry()) {
    INFO(e.name);
    ReducerOptions ro;
    ro.allreduce = e.name;
    const std::vector<float> mine(L.total, (float)(w.rank + 1));
    CUDA_CHECK(cudaMemcpy(grads.get(), mine.data(), L.total * 4, cudaMemcpyHostToDevice));
    GpuReducer reducer(L, buckets, grads.get(), comm.get(), stream, ro);
    CHECK(reducer.copy_engine_in_use() == (ro.allreduce == "copy-engine"));
    CHECK(reducer.device_bytes() == GpuReducer::planned_device_bytes(L, buckets, ro, 2));
    reducer.prepare_for_backward();
    reducer.finalize();  // every bucket launches here
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto got = to_host(grads);
    size_t wrong = 0;
    for (float g : got) wrong += g != 1.5f;
    CHECK(wrong == 0u);
  }
  ReducerOptions bad;
  bad.allreduce = "gloo";
  try {
    GpuReducer reducer(L, buckets, grads.get(), comm.get(), stream, bad);
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "unknown all-reduce transport 'gloo' (choose one of: nccl, copy-engine)");
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}
