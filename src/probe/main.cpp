// vitddp-probe: the link bandwidth of a transport (probe/probe.h; docs/benchmarks.md, "Link probe").
// Exit codes: 0 done, 2 bad options, ranks started with different ones, a --max-bytes the host
// transport cannot hold, or --out refused (every rank, before any work), 1 a failure while probing
// (every rank ends through abort_all). The --out file is created only once the results are in, so
// a failed probe leaves none behind.
#include <climits>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/app/rank_agreement.h"
#include "src/engines/engine.h"  // visible_cuda_devices
#include "src/engines/memory_estimate.h"  // mem_available_bytes
#include "src/probe/probe.h"
#include "src/io/h5_util.h"

using namespace vitddp;
using namespace vitddp::probe;

namespace {

std::vector<std::string> gather_hostnames(const World& w) {
  constexpr int kLen = 256;
  char mine[kLen] = {0};
  std::strncpy(mine, w.hostname.c_str(), kLen - 1);
  std::vector<char> all((size_t)kLen * w.world_size);
  MPI_CHECK(MPI_Allgather(mine, kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, MPI_COMM_WORLD));
  std::vector<std::string> out;
  for (int r = 0; r < w.world_size; ++r) out.emplace_back(&all[(size_t)r * kLen]);
  return out;
}

int finish(int code) {
  MPI_Finalize();
  return code;
}

/// Rank 0 prints "[vitddp-probe] error: <message>"; every rank's exit code (2).
int refuse(const World& w, const std::string& message) {
  if (w.rank == 0) std::fprintf(stderr, "[vitddp-probe] error: %s\n", message.c_str());
  return finish(2);
}

/// Why the host transport cannot probe messages of up to `max_bytes` ("" when it can): each rank
/// holds two buffers of that size (host memory of the `local_size` ranks on this host against
/// MemAvailable), and MPI's reduce-scatter and all-gather take a rank's share as an int count.
std::string host_probe_problem(int64_t max_bytes, const World& w) {
  const double gib = 1024.0 * 1024.0 * 1024.0;
  if (max_bytes / 4 / w.world_size > INT_MAX)
    return "--max-bytes: " + std::to_string(max_bytes) + " bytes is a share of more than " + std::to_string(INT_MAX) +
           " fp32 elements per rank, beyond MPI's int counts";
  const size_t need = 2 * (size_t)max_bytes * (size_t)w.local_size, avail = mem_available_bytes();
  if (avail > 0 && need > avail) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "--max-bytes: %d rank(s) on this host need %.2f GiB of host memory for two buffers of %.2f GiB "
                  "each, but only %.2f GiB is available",
                  w.local_size, need / gib, max_bytes / gib, avail / gib);
    return line;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  const World w = init_world(&argc, &argv);
  h5::prepare_library();
  // Ranks started with different command lines (MPMD, a wrapper on one node) stop together before
  // any rank acts on its own: their collectives would not match.
  std::string mismatch;
  try {
    mismatch = command_line_mismatch(std::vector<std::string>(argv + 1, argv + argc), w);
  } catch (const std::exception& e) {
    abort_all(w, e.what(), 1);
  }
  if (!mismatch.empty()) return refuse(w, mismatch);
  ProbeOptions o;
  try {
    o = parse_options(argc, argv, gpu_transport_names());
  } catch (const std::invalid_argument& e) {
    return refuse(w, e.what());
  }
  if (o.help) {
    if (w.rank == 0) std::printf("%s", usage().c_str());
    return finish(0);
  }
  const std::vector<int64_t> sizes = probe_sizes(o.min_bytes, o.max_bytes, w.world_size);
  if (sizes.empty())
    return refuse(w, "--max-bytes: " + std::to_string(o.max_bytes) + " is less than one fp32 element per rank (" +
                         std::to_string(4 * w.world_size) + " bytes)");
  const std::vector<std::string> gpu = gpu_transport_names();
  const bool on_gpu = std::find(gpu.begin(), gpu.end(), o.transport) != gpu.end();
  if (on_gpu && !all_ranks_ok(visible_cuda_devices() > 0))
    return refuse(w, "--transport " + o.transport +
                         ": no CUDA device is visible on some rank's host (--transport mpi measures MPI without a GPU)");
  if (!on_gpu) {
    const std::string e = lowest_rank_error(host_probe_problem(sizes.back(), w));
    if (!e.empty()) return refuse(w, e);
  }
  // --out is tried now (created and removed again) and written at the end.
  std::string refused;
  if (w.rank == 0 && !o.out.empty()) {
    refused = ResultsFile::create_trial_problem(o.out, o.overwrite);
    if (!refused.empty()) refused = "--out: " + refused;
  }
  if (!all_ranks_ok(refused.empty())) return refuse(w, refused);
  const std::vector<std::string> hosts = gather_hostnames(w);
  if (w.rank == 0)
    std::printf("[vitddp-probe] transport %s, %d rank(s) on %zu host(s), %zu size(s) from %lld to %lld bytes, "
                "%d warm-up + %d timed iterations each\n",
                o.transport.c_str(), w.world_size, std::set<std::string>(hosts.begin(), hosts.end()).size(), sizes.size(),
                (long long)sizes.front(), (long long)sizes.back(), o.warmup,
                o.iters);
  try {
    const ProbeResult r = on_gpu ? run_gpu_probe(o, w, sizes) : run_host_probe(o, w, sizes);
    if (w.rank == 0) {
      std::printf("%s", result_table(r, w.world_size).c_str());
      if (on_gpu) std::printf("[vitddp-probe] NCCL transport: %s\n", r.nccl_transport.c_str());
      if (!o.out.empty()) {
        ResultsFile file = ResultsFile::create(o.out, o.overwrite);
        write_result(file, o, r, w.world_size, hosts);
        std::printf("[vitddp-probe] written to %s\n", o.out.c_str());
      }
    }
  } catch (const std::exception& e) {
    abort_all(w, e.what(), 1);
  }
  return finish(0);
}
