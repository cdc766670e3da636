// The CUDA-free part of probe/probe.h: options, sizes, bandwidth formulas, table, file.
#include "src/probe/probe.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "mpi/transports/host_transport.h"
#include "src/app/build_info.h"
#include "src/io/results_h5.h"

namespace vitddp::probe {

std::string usage() {
  return "usage: mpirun -np N vitddp-probe [options]\n"
         "Measures the link bandwidth of a transport as nccl-tests does: all-reduce (and reduce-scatter,\n"
         "all-gather where the transport has them) over message sizes doubling from --min-bytes to --max-bytes;\n"
         "the time of a size is the mean of --iters iterations after --warmup, the max over ranks;\n"
         "algbw = bytes / time, busbw = algbw x 2(n-1)/n (all-reduce) or (n-1)/n (GB/s = 1e9 bytes/s).\n"
         "  --transport NAME   nccl, copy-engine (GPU backend) or mpi (host memory); default nccl, or mpi\n"
         "                     without the GPU backend\n"
         "  --min-bytes SIZE   smallest message, bytes with optional K, M, G (1024-based); default 1K\n"
         "  --max-bytes SIZE   largest message; default 256M\n"
         "  --warmup N         untimed iterations per size; default 5\n"
         "  --iters N          timed iterations per size; default 20\n"
         "  --out FILE         write the curve to FILE (HDF5, group link_probe/); default: the table only\n"
         "  --overwrite        replace an existing --out\n"
         "  --help             this text\n";
}

int64_t parse_bytes(const std::string& option, const std::string& text) {
  size_t used = 0;
  long long v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string suffix = used ? text.substr(used) : "";
  const int shift = suffix.empty() ? 0 : suffix == "K" || suffix == "k" ? 10 : suffix == "M" || suffix == "m" ? 20
                    : suffix == "G" || suffix == "g" ? 30 : -1;
  if (!used || shift < 0 || v <= 0 || v > (1LL << (62 - shift)))
    throw std::invalid_argument(option + ": '" + text + "' is not a positive size (bytes, optionally with K, M or G)");
  return (int64_t)v << shift;
}

namespace {
int parse_count(const std::string& option, const std::string& text, int lo) {
  size_t used = 0;
  int v = lo - 1;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (!used || used != text.size() || v < lo)
    throw std::invalid_argument(option + ": '" + text + "' is not an integer >= " + std::to_string(lo));
  return v;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}
}  // namespace

ProbeOptions parse_options(int argc, char** argv, const std::vector<std::string>& gpu_transports) {
  ProbeOptions o;
  o.transport = gpu_transports.empty() ? "mpi" : "nccl";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") { o.help = true; continue; }
    if (a == "--overwrite") { o.overwrite = true; continue; }
    const bool takes = a == "--transport" || a == "--min-bytes" || a == "--max-bytes" || a == "--warmup" ||
                       a == "--iters" || a == "--out";
    if (!takes) throw std::invalid_argument("unknown option '" + a + "' (see --help)");
    if (i + 1 >= argc) throw std::invalid_argument(a + ": needs a value");
    const std::string v = argv[++i];
    if (a == "--transport") o.transport = v;
    else if (a == "--min-bytes") o.min_bytes = parse_bytes(a, v);
    else if (a == "--max-bytes") o.max_bytes = parse_bytes(a, v);
    else if (a == "--warmup") o.warmup = parse_count(a, v, 0);
    else if (a == "--iters") o.iters = parse_count(a, v, 1);
    else o.out = v;
  }
  std::vector<std::string> names = gpu_transports;
  for (const auto& e : host_transport_registry()) names.emplace_back(e.name);
  if (std::find(names.begin(), names.end(), o.transport) == names.end()) {
    const bool gpu_name = o.transport == "nccl" || o.transport == "copy-engine";
    throw std::invalid_argument("--transport: '" + o.transport + "' " +
                                (gpu_name && gpu_transports.empty() ? std::string("needs the GPU backend, which this build lacks (VITDDP_GPU=OFF)")
                                                                    : "is not a transport") +
                                " (choose one of: " + joined(names) + ")");
  }
  if (o.min_bytes > o.max_bytes)
    throw std::invalid_argument("--min-bytes (" + std::to_string(o.min_bytes) + ") is larger than --max-bytes (" +
                                std::to_string(o.max_bytes) + ")");
  if (o.overwrite && o.out.empty()) throw std::invalid_argument("--overwrite: needs --out");
  return o;
}

std::vector<int64_t> probe_sizes(int64_t min_bytes, int64_t max_bytes, int world_size) {
  const int64_t unit = 4LL * world_size;
  std::vector<int64_t> out;
  for (int64_t b = min_bytes; b <= max_bytes; b *= 2) {
    const int64_t r = b / unit * unit;
    if (r > 0 && (out.empty() || out.back() != r)) out.push_back(r);
    if (b > max_bytes / 2) break;  // no overflow past max
  }
  return out;
}

double algbw_gbps(int64_t bytes, double seconds) { return seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0; }

double bus_factor(const std::string& collective, int n) {
  if (collective == "allreduce") return 2.0 * (n - 1) / n;
  if (collective == "reducescatter" || collective == "allgather") return (double)(n - 1) / n;
  throw std::invalid_argument("unknown collective '" + collective + "'");
}

std::string result_table(const ProbeResult& r, int n) {
  std::string s;
  char buf[160];
  std::snprintf(buf, sizeof buf, "#%13s %12s", "size (B)", "count (fp32)");
  s += buf;
  for (const auto& c : r.collectives) {
    std::snprintf(buf, sizeof buf, "  | %-13s %9s %8s %8s", c.name.c_str(), "time (us)", "algbw", "busbw");
    s += buf;
  }
  s += "\n";
  for (size_t i = 0; i < r.bytes.size(); ++i) {
    std::snprintf(buf, sizeof buf, " %13lld %12lld", (long long)r.bytes[i], (long long)(r.bytes[i] / 4));
    s += buf;
    for (const auto& c : r.collectives) {
      const double a = algbw_gbps(r.bytes[i], c.time[i]);
      std::snprintf(buf, sizeof buf, "  | %13s %9.1f %8.2f %8.2f", "", c.time[i] * 1e6, a, a * bus_factor(c.name, n));
      s += buf;
    }
    s += "\n";
  }
  s += "# algbw, busbw in GB/s (1e9 bytes/s), nccl-tests' definitions\n";
  return s;
}

void write_result(ResultsFile& f, const ProbeOptions& o, const ProbeResult& r, int n,
                  const std::vector<std::string>& hosts) {
  f.set_attr("program", "vitddp-probe");
  f.set_attr("git_commit", vitddp_git_commit());
  f.set_attr("transport", o.transport);
  f.set_attr("world_size", (int64_t)n);
  f.set_attr("hostnames", hosts);
  f.set_attr("nccl_transport", r.nccl_transport);
  f.set_attr("warmup", (int64_t)o.warmup);
  f.set_attr("iters", (int64_t)o.iters);
  f.set_attr("collectives", [&r] {
    std::vector<std::string> v;
    for (const auto& c : r.collectives) v.push_back(c.name);
    return v;
  }());
  const std::vector<uint64_t> shape = {r.bytes.size()};
  f.write_array("link_probe/bytes", shape, r.bytes.data(), "bytes",
                "message size: the all-reduce buffer, the reduce-scatter input, the all-gather output");
  for (const auto& c : r.collectives) {
    std::vector<double> alg, bus;
    for (size_t i = 0; i < r.bytes.size(); ++i) {
      alg.push_back(algbw_gbps(r.bytes[i], c.time[i]));
      bus.push_back(alg.back() * bus_factor(c.name, n));
    }
    const std::string g = "link_probe/" + c.name + "/";
    f.write_array(g + "time", shape, c.time.data(), "s", "mean time of one " + c.name + ", the max over ranks");
    f.write_array(g + "algbw", shape, alg.data(), "GB/s", "bytes / time (1 GB = 1e9 bytes; nccl-tests)");
    f.write_array(g + "busbw", shape, bus.data(), "GB/s",
                  c.name == "allreduce" ? "algbw x 2(n-1)/n (nccl-tests)" : "algbw x (n-1)/n (nccl-tests)");
  }
  f.close();
}

std::vector<double> max_over_ranks(std::vector<double> v) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data(), (int)v.size(), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return v;
}

}  // namespace vitddp::probe
