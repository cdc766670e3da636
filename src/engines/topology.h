// Where each rank's GPU sits: its NVLink peers, its PCIe link and its NUMA node, as NVML reports
// them (what `nvidia-smi topo -m` shows), gathered to rank 0 for the results file's `topology/`
// group (docs/schema.md) and the start-up line. CUDA-free: the NVML part is src/engines/topology_gpu.cpp.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "mpi/world/world.h"
#include "src/io/results_h5.h"

namespace vitddp {

/// One rank's GPU as NVML sees it. Integers are -1 where unknown; `status` is "ok", or why the
/// rest is unknown ("no GPU (CPU backend)", "libnvidia-ml.so.1 not found", an NVML error string).
struct GpuTopology {
  std::string status = "unknown";
  int device = -1;          ///< CUDA ordinal on its host (-1: no GPU)
  std::string pci_bus_id;   ///< "dddd:bb:dd.f", lower-case hex (CUDA's and sysfs's spelling)
  int numa_node = -1;       ///< nvmlDeviceGetNumaNodeId, else /sys/bus/pci/devices/<bus id>/numa_node
  int pcie_gen = -1, pcie_width = -1;          ///< current link (nvmlDeviceGetCurrPcieLinkGeneration/Width)
  int pcie_max_gen = -1, pcie_max_width = -1;  ///< what the link can reach (nvmlDeviceGetMaxPcieLink*)
  /// Active NVLinks to another GPU directly: (that GPU's PCI bus id, links).
  std::vector<std::pair<std::string, int>> nvlink_gpu_links;
  int nvlink_switch_links = 0;  ///< active NVLinks to an NVSwitch (HGX boards: every GPU pair meets there)
};

/// The GPU with CUDA ordinal `device` (as cudaSetDevice takes it), through NVML, loaded at run
/// time (dlopen of libnvidia-ml.so.1: a machine without a driver degrades to status "...not
/// found"). Never throws: every failure lands in `status`. Defined in src/engines/topology_gpu.cpp; the
/// CPU-only build (src/engines/gpu_backend_off.cpp) returns status "GPU backend not built".
GpuTopology query_gpu_topology(int device);

/// Collective on MPI_COMM_WORLD: every rank's `mine`, in rank order, on rank 0 (empty elsewhere).
std::vector<GpuTopology> gather_topology(const GpuTopology& mine, const World& w);

/// NVLinks between the GPUs of ranks i and j, [ranks x ranks] row-major: the direct GPU-to-GPU
/// links of i to j's bus id, or, when both reach NVSwitches and share a host, the smaller of their
/// switch link counts (how `nvidia-smi topo -m` counts "NV18" on an HGX board). 0 on the diagonal
/// and between hosts. `hosts[r]` is rank r's host name.
std::vector<int64_t> nvlink_matrix(const std::vector<GpuTopology>& t, const std::vector<std::string>& hosts);

/// Rank 0's start-up line (without "[vitddp] "), e.g. "topology: rank 0 GPU 0000:19:00.0 (NUMA 0,
/// PCIe gen5 x16) NV18 to rank 1; rank 1 ...", or "topology: rank 0 unknown (reason); ...".
std::string topology_line(const std::vector<GpuTopology>& t, const std::vector<std::string>& hosts);

/// Rank 0: the `topology/` group (docs/schema.md): nvlink_links [ranks, ranks] int64 (as
/// nvlink_matrix), pcie_gen, pcie_width, pcie_max_gen, pcie_max_width, numa_node, device [ranks]
/// int64 (-1 unknown), pci_bus_id and status [ranks] strings. Throws as ResultsFile::write_array.
void write_topology(ResultsFile& f, const std::vector<GpuTopology>& t, const std::vector<std::string>& hosts);

}  // namespace vitddp
