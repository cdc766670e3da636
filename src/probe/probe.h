// vitddp-probe: the link bandwidth of a transport, as nccl-tests measures it (all_reduce_perf,
// reduce_scatter_perf, all_gather_perf), on vitddp's own communicator bootstrap and transports
// (mpi/world/, the registries of mpi/transports/). CUDA-free; the GPU part is gpu_probe_gpu.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mpi/world/world.h"
#include "src/io/results_h5.h"

namespace vitddp::probe {

/// The command line. Sizes are bytes per rank of the collective's full buffer (nccl-tests'
/// "size": the all-reduce buffer, the reduce-scatter input, the all-gather output).
struct ProbeOptions {
  std::string transport;      ///< a GPU registry name (nccl, copy-engine) or a host one (mpi)
  int64_t min_bytes = 1024;   ///< --min-bytes, default 1K
  int64_t max_bytes = 256LL << 20;  ///< --max-bytes, default 256M
  int warmup = 5;             ///< --warmup: untimed iterations per size
  int iters = 20;             ///< --iters: timed iterations per size
  std::string out;            ///< --out: HDF5 file to write ("" = print the table only)
  bool overwrite = false;     ///< --overwrite: replace an existing --out
  bool help = false;
};

/// --help's text.
std::string usage();

/// Parses argv[1..]; `gpu_transports` are the GPU registry's names in this build (empty in the
/// CPU-only build). Throws std::invalid_argument with one line naming the option and the reason.
/// Sizes take K, M, G (1024-based, as nccl-tests' -b/-e) or plain bytes.
ProbeOptions parse_options(int argc, char** argv, const std::vector<std::string>& gpu_transports);

/// "1K", "2G", "512" -> bytes; throws std::invalid_argument("<option>: ...") otherwise.
int64_t parse_bytes(const std::string& option, const std::string& text);

/// The message sizes: min, 2 min, 4 min, ... up to max (inclusive), each rounded down to a
/// multiple of 4 x world_size bytes (whole fp32 elements, an equal share per rank); sizes that
/// round to 0 are dropped, duplicates kept once.
std::vector<int64_t> probe_sizes(int64_t min_bytes, int64_t max_bytes, int world_size);

/// One collective's curve: time[i] (s, mean per iteration, the max over ranks) for sizes[i].
struct CollectiveTimes {
  std::string name;           ///< "allreduce", "reducescatter", "allgather" (vitddp_tools' names)
  std::vector<double> time;
};

/// What a probe measured.
struct ProbeResult {
  std::vector<int64_t> bytes;
  std::vector<CollectiveTimes> collectives;
  std::string nccl_transport = "none";  ///< what NCCL chose (mpi/world/nccl_log.h), "none" without NCCL
};

/// nccl-tests (doc/PERFORMANCE.md): algbw = bytes / time in GB/s (1e9 bytes/s); busbw = algbw x
/// 2(n-1)/n for allreduce, (n-1)/n for reducescatter and allgather. Throws std::invalid_argument
/// for another collective name.
double algbw_gbps(int64_t bytes, double seconds);
double bus_factor(const std::string& collective, int world_size);

/// Rank 0: the nccl-tests-like table (size, count, then time (us), algbw, busbw per collective).
std::string result_table(const ProbeResult& r, int world_size);

/// Rank 0: the HDF5 file `f` (created by ResultsFile::create before the probe; closed here) (docs/benchmarks.md, "Link probe"): link_probe/bytes int64 [sizes];
/// link_probe/<coll>/time, algbw, busbw float64 [sizes]; root attributes program, transport,
/// world_size, hosts, nccl_transport, iters, warmup. Throws std::runtime_error on HDF5 failure.
void write_result(ResultsFile& f, const ProbeOptions& o, const ProbeResult& r, int world_size,
                  const std::vector<std::string>& hosts);

/// The host transport's probe (mpi/transports/host_transport.h): allreduce through the registry's
/// transport, reducescatter and allgather through MPI_Reduce_scatter_block / MPI_Allgather when the
/// transport is "mpi". Timed with MPI_Wtime. Collective.
ProbeResult run_host_probe(const ProbeOptions& o, const World& w, const std::vector<int64_t>& sizes);

/// The GPU transport's probe (mpi/transports/gpu_transport_gpu.h), on this rank's GPU with an
/// NCCL communicator (mpi/world/nccl_comm_gpu.h): allreduce through the registry's transport,
/// reducescatter and allgather through ncclReduceScatter / ncclAllGather when it is "nccl". Timed
/// with CUDA events. Collective. The CPU-only build's version throws std::logic_error.
ProbeResult run_gpu_probe(const ProbeOptions& o, const World& w, const std::vector<int64_t>& sizes);

/// The GPU registry's names in this build ({} in the CPU-only build).
std::vector<std::string> gpu_transport_names();

/// The max over ranks of `v` (MPI_Allreduce MAX, elementwise): nccl-tests' reported time.
std::vector<double> max_over_ranks(std::vector<double> v);

}  // namespace vitddp::probe
