// The CUDA-free half of src/engines/topology.h: gathering, the NVLink matrix, the line, the file group.
#include "src/engines/topology.h"

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>

namespace vitddp {
namespace {

/// One rank's topology as text for the gather: "key=value" lines; nvlink lines "link=<bus> <n>".
std::string encode(const GpuTopology& t) {
  std::ostringstream s;
  s << "status=" << t.status << "\ndevice=" << t.device << "\nbus=" << t.pci_bus_id << "\nnuma=" << t.numa_node
    << "\ngen=" << t.pcie_gen << "\nwidth=" << t.pcie_width << "\nmaxgen=" << t.pcie_max_gen
    << "\nmaxwidth=" << t.pcie_max_width << "\nswitch=" << t.nvlink_switch_links << "\n";
  for (const auto& [bus, n] : t.nvlink_gpu_links) s << "link=" << bus << " " << n << "\n";
  return s.str();
}

GpuTopology decode(const std::string& text) {
  GpuTopology t;
  std::istringstream s(text);
  for (std::string line; std::getline(s, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    auto num = [&v] { return std::atoi(v.c_str()); };
    if (k == "status") t.status = v;
    else if (k == "device") t.device = num();
    else if (k == "bus") t.pci_bus_id = v;
    else if (k == "numa") t.numa_node = num();
    else if (k == "gen") t.pcie_gen = num();
    else if (k == "width") t.pcie_width = num();
    else if (k == "maxgen") t.pcie_max_gen = num();
    else if (k == "maxwidth") t.pcie_max_width = num();
    else if (k == "switch") t.nvlink_switch_links = num();
    else if (k == "link") {
      const size_t sp = v.find(' ');
      if (sp != std::string::npos) t.nvlink_gpu_links.emplace_back(v.substr(0, sp), std::atoi(v.c_str() + sp + 1));
    }
  }
  return t;
}

}  // namespace

std::vector<GpuTopology> gather_topology(const GpuTopology& mine, const World& w) {
  const std::string text = encode(mine);
  const int len = (int)text.size();
  std::vector<int> lens(w.rank == 0 ? w.world_size : 0), displs(lens.size());
  MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  int total = 0;
  for (size_t r = 0; r < lens.size(); ++r) displs[r] = total, total += lens[r];
  std::vector<char> all(total);
  MPI_CHECK(MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD));
  std::vector<GpuTopology> out;
  for (size_t r = 0; r < lens.size(); ++r) out.push_back(decode(std::string(&all[displs[r]], lens[r])));
  return out;
}

std::vector<int64_t> nvlink_matrix(const std::vector<GpuTopology>& t, const std::vector<std::string>& hosts) {
  const size_t n = t.size();
  std::vector<int64_t> m(n * n, 0);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      if (i == j || i >= hosts.size() || j >= hosts.size() || hosts[i] != hosts[j] || t[j].pci_bus_id.empty()) continue;
      int64_t links = 0;
      for (const auto& [bus, k] : t[i].nvlink_gpu_links)
        if (bus == t[j].pci_bus_id) links += k;
      if (links == 0 && t[i].nvlink_switch_links > 0 && t[j].nvlink_switch_links > 0)
        links = std::min(t[i].nvlink_switch_links, t[j].nvlink_switch_links);
      m[i * n + j] = links;
    }
  return m;
}

std::string topology_line(const std::vector<GpuTopology>& t, const std::vector<std::string>& hosts) {
  const std::vector<int64_t> m = nvlink_matrix(t, hosts);
  const size_t n = t.size();
  std::ostringstream s;
  s << "topology:";
  for (size_t i = 0; i < n; ++i) {
    s << (i ? "; " : " ") << "rank " << i;
    if (t[i].status != "ok") {
      s << " " << (t[i].status.rfind("no GPU", 0) == 0 ? t[i].status : "unknown (" + t[i].status + ")");
      continue;
    }
    auto known = [](int v) { return v < 0 ? std::string("?") : std::to_string(v); };
    s << " GPU " << t[i].device << " (NUMA " << known(t[i].numa_node) << ", PCIe gen" << known(t[i].pcie_gen) << " x"
      << known(t[i].pcie_width) << ")";
    bool any = false;
    for (size_t j = 0; j < n; ++j)
      if (m[i * n + j] > 0) s << (any ? ", " : " ") << "NV" << m[i * n + j] << " to rank " << j, any = true;
    if (!any && n > 1) s << " no NVLink to another rank";
  }
  return s.str();
}

void write_topology(ResultsFile& f, const std::vector<GpuTopology>& t, const std::vector<std::string>& hosts) {
  const uint64_t n = t.size();
  const std::vector<int64_t> m = nvlink_matrix(t, hosts);
  f.write_array("topology/nvlink_links", {n, n}, m.data(), "links",
                "active NVLinks between the GPUs of ranks i and j (direct, or through NVSwitches on one host: the "
                "smaller switch link count); 0 none or unknown");
  auto column = [&](const char* name, int GpuTopology::*field, const char* units, const char* what) {
    std::vector<int64_t> v;
    for (const auto& r : t) v.push_back(r.*field);
    f.write_array(std::string("topology/") + name, {n}, v.data(), units, std::string(what) + " (-1 unknown)");
  };
  column("device", &GpuTopology::device, "1", "CUDA ordinal of each rank's GPU on its host");
  column("numa_node", &GpuTopology::numa_node, "1", "NUMA node of each rank's GPU");
  column("pcie_gen", &GpuTopology::pcie_gen, "1", "current PCIe link generation of each rank's GPU");
  column("pcie_width", &GpuTopology::pcie_width, "lanes", "current PCIe link width of each rank's GPU");
  column("pcie_max_gen", &GpuTopology::pcie_max_gen, "1", "maximum PCIe link generation of each rank's GPU");
  column("pcie_max_width", &GpuTopology::pcie_max_width, "lanes", "maximum PCIe link width of each rank's GPU");
  std::vector<std::string> bus, status;
  for (const auto& r : t) bus.push_back(r.pci_bus_id), status.push_back(r.status);
  f.write_strings("topology/pci_bus_id", bus, "", "PCI bus id of each rank's GPU (dddd:bb:dd.f; empty unknown)");
  f.write_strings("topology/status", status, "", "\"ok\", or why the rank's topology is unknown");
}

}  // namespace vitddp
