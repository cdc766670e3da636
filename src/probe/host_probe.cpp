// The host transport's probe (probe/probe.h): host buffers, MPI_Wtime.
#include <mpi.h>

#include <functional>

#include "mpi/transports/host_transport.h"
#include "src/probe/probe.h"

namespace vitddp::probe {
namespace {

/// Mean seconds of one `op` over `iters` after `warmup` untimed ones, all ranks starting together
/// (MPI_Barrier), then the max over ranks.
double timed(const std::function<void()>& op, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) op();
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) op();
  return (MPI_Wtime() - t0) / iters;
}

}  // namespace

ProbeResult run_host_probe(const ProbeOptions& o, const World& w, const std::vector<int64_t>& sizes) {
  const std::unique_ptr<HostTransport> t = make_host_transport(o.transport);
  const bool mpi = o.transport == "mpi";
  const size_t max_count = sizes.empty() ? 0 : (size_t)sizes.back() / 4;
  std::vector<float> a(max_count, 0.0f), b(max_count, 0.0f);  // zeros: sums never overflow
  ProbeResult r;
  r.bytes = sizes;
  r.collectives.push_back({"allreduce", {}});
  if (mpi) r.collectives.push_back({"reducescatter", {}}), r.collectives.push_back({"allgather", {}});
  for (const int64_t bytes : sizes) {
    const size_t count = (size_t)bytes / 4, share = count / w.world_size;
    r.collectives[0].time.push_back(timed([&] { t->sum(a.data(), count, DType::F32); }, o.warmup, o.iters));
    if (!mpi) continue;
    r.collectives[1].time.push_back(timed([&] {
      MPI_CHECK(MPI_Reduce_scatter_block(a.data(), b.data(), (int)share, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    }, o.warmup, o.iters));
    r.collectives[2].time.push_back(timed([&] {
      MPI_CHECK(MPI_Allgather(a.data(), (int)share, MPI_FLOAT, b.data(), (int)share, MPI_FLOAT, MPI_COMM_WORLD));
    }, o.warmup, o.iters));
  }
  for (auto& c : r.collectives) c.time = max_over_ranks(c.time);
  return r;
}

}  // namespace vitddp::probe
