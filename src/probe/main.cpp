// vitddp-probe: the link bandwidth of a transport (probe/probe.h; docs/benchmarks.md, "Link probe").
// Exit codes: 0 done, 2 bad options or --out refused (every rank, before any work), 1 a failure
// while probing (every rank ends through abort_all).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <stdexcept>

#include "src/engines/engine.h"  // visible_cuda_devices
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

}  // namespace

int main(int argc, char** argv) {
  const World w = init_world(&argc, &argv);
  h5::prepare_library();
  ProbeOptions o;
  try {
    o = parse_options(argc, argv, gpu_transport_names());
  } catch (const std::invalid_argument& e) {
    if (w.rank == 0) std::fprintf(stderr, "[vitddp-probe] error: %s\n", e.what());
    return finish(2);
  }
  if (o.help) {
    if (w.rank == 0) std::printf("%s", usage().c_str());
    return finish(0);
  }
  const std::vector<int64_t> sizes = probe_sizes(o.min_bytes, o.max_bytes, w.world_size);
  if (sizes.empty()) {
    if (w.rank == 0)
      std::fprintf(stderr, "[vitddp-probe] error: --max-bytes: %lld is less than one fp32 element per rank (%d bytes)\n",
                   (long long)o.max_bytes, 4 * w.world_size);
    return finish(2);
  }
  const std::vector<std::string> gpu = gpu_transport_names();
  const bool on_gpu = std::find(gpu.begin(), gpu.end(), o.transport) != gpu.end();
  if (on_gpu && !all_ranks_ok(visible_cuda_devices() > 0)) {
    if (w.rank == 0)
      std::fprintf(stderr, "[vitddp-probe] error: --transport %s: no CUDA device is visible on some rank's host "
                   "(--transport mpi measures MPI without a GPU)\n", o.transport.c_str());
    return finish(2);
  }
  std::optional<ResultsFile> file;
  std::string refused;
  if (w.rank == 0 && !o.out.empty()) {
    try {
      file.emplace(ResultsFile::create(o.out, o.overwrite));
    } catch (const std::exception& e) {
      refused = std::string("--out: ") + e.what();
    }
  }
  if (!all_ranks_ok(refused.empty())) {
    if (w.rank == 0) std::fprintf(stderr, "[vitddp-probe] error: %s\n", refused.c_str());
    return finish(2);
  }
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
      if (file) {
        write_result(*file, o, r, w.world_size, hosts);
        std::printf("[vitddp-probe] written to %s\n", o.out.c_str());
      }
    }
  } catch (const std::exception& e) {
    abort_all(w, e.what(), 1);
  }
  return finish(0);
}
