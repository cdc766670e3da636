// The GPU transport's probe (probe/probe.h): device buffers on this rank's GPU, CUDA events.
#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/event_pair.h"
#include "mpi/transports/gpu_transport_gpu.h"
#include "mpi/world/nccl_check_gpu.h"
#include "mpi/world/nccl_comm_gpu.h"
#include "mpi/world/nccl_log.h"
#include "src/probe/probe.h"
#include "src/engines/engine.h"

namespace vitddp::probe {
namespace {

/// Device buffer of `bytes`, zeroed; freed on destruction.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) {
    CUDA_CHECK(cudaMalloc(&ptr, bytes ? bytes : 4));
    CUDA_CHECK(cudaMemset(ptr, 0, bytes ? bytes : 4));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* ptr = nullptr;
  size_t bytes;
};

/// Mean seconds of one `op` (enqueued on `s`) over `iters` after `warmup`, between two CUDA
/// events, all ranks starting together (MPI_Barrier after the warm-up has finished).
double timed(const std::function<void()>& op, cudaStream_t s, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) op();
  CUDA_CHECK(cudaStreamSynchronize(s));
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  EventPair ev;
  ev.record_start(s);
  for (int i = 0; i < iters; ++i) op();
  ev.record_stop(s);
  return ev.elapsed_ms() / 1e3 / iters;
}

}  // namespace

std::vector<std::string> gpu_transport_names() {
  std::vector<std::string> v;
  for (const auto& e : gpu_transport_registry()) v.emplace_back(e.name);
  return v;
}

ProbeResult run_gpu_probe(const ProbeOptions& o, const World& w, const std::vector<int64_t>& sizes) {
  CUDA_CHECK(cudaSetDevice(select_device(w, visible_cuda_devices())));
  const std::string nccl_log = redirect_nccl_info_log(w.rank);
  const NcclComm comm(w);
  const size_t max_bytes = sizes.empty() ? 4 : (size_t)sizes.back();
  DeviceBuffer a(max_bytes), b(max_bytes);
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  ReducerOptions ro;
  ro.allreduce = o.transport;
  const GpuTransportEntry& entry = gpu_transport(o.transport);
  const std::vector<size_t> bucket_bytes = {max_bytes};  // one bucket, as large as the largest message
  const GpuTransportArgs args{comm.get(), w.world_size, ro, {{a.ptr, a.bytes}}, bucket_bytes};
  const std::unique_ptr<GpuTransport> t = entry.make(args);
  const bool nccl = o.transport == "nccl";

  ProbeResult r;
  r.bytes = sizes;
  r.collectives.push_back({"allreduce", {}});
  if (nccl) r.collectives.push_back({"reducescatter", {}}), r.collectives.push_back({"allgather", {}});
  for (const int64_t bytes : sizes) {
    const size_t count = (size_t)bytes / 4, share = count / w.world_size;
    r.collectives[0].time.push_back(
        timed([&] { t->all_reduce(0, a.ptr, count, DType::F32, ReduceOp::Sum, s); }, s, o.warmup, o.iters));
    if (!nccl) continue;
    r.collectives[1].time.push_back(timed([&] {
      NCCL_CHECK(ncclReduceScatter(a.ptr, b.ptr, share, ncclFloat32, ncclSum, comm.get(), s));
    }, s, o.warmup, o.iters));
    r.collectives[2].time.push_back(timed([&] {
      NCCL_CHECK(ncclAllGather(a.ptr, b.ptr, share, ncclFloat32, comm.get(), s));
    }, s, o.warmup, o.iters));
  }
  CUDA_CHECK(cudaStreamSynchronize(s));
  cudaStreamDestroy(s);
  r.nccl_transport = read_nccl_transport(nccl_log);
  for (auto& c : r.collectives) c.time = max_over_ranks(c.time);
  return r;
}

}  // namespace vitddp::probe
