// The CUDA-free part of src/engines/topology.h: the NVLink matrix and the start-up line, on hand-made
// topologies (a directly linked pair, an NVSwitch board, two hosts, an unknown rank).
#include "src/engines/topology.h"
#include "tests/catch.h"

using namespace vitddp;

namespace {
GpuTopology gpu(int device, const std::string& bus, int switch_links = 0) {
  GpuTopology t;
  t.status = "ok";
  t.device = device;
  t.pci_bus_id = bus;
  t.numa_node = device / 4;
  t.pcie_gen = 5;
  t.pcie_width = 16;
  t.nvlink_switch_links = switch_links;
  return t;
}
}  // namespace

TEST_CASE("topology: direct NVLinks count links to the peer's bus id, same host only", "[topology]") {
  GpuTopology a = gpu(0, "0000:19:00.0"), b = gpu(1, "0000:3b:00.0"), c = gpu(0, "0000:19:00.0");
  a.nvlink_gpu_links = {{"0000:3b:00.0", 4}};
  b.nvlink_gpu_links = {{"0000:19:00.0", 4}};
  const auto m = nvlink_matrix({a, b, c}, {"n1", "n1", "n2"});
  CHECK(m == std::vector<int64_t>{0, 4, 0, 4, 0, 0, 0, 0, 0});  // c: another host with the same bus id
  CHECK(topology_line({a, b}, {"n1", "n1"}) ==
        "topology: rank 0 GPU 0 (NUMA 0, PCIe gen5 x16) NV4 to rank 1; rank 1 GPU 1 (NUMA 0, PCIe gen5 x16) NV4 to rank 0");
}

TEST_CASE("topology: NVSwitch boards pair every GPU with the smaller switch link count", "[topology]") {
  const auto m = nvlink_matrix({gpu(0, "0000:19:00.0", 18), gpu(5, "0000:bb:00.0", 18), gpu(2, "0000:4c:00.0", 12)},
                               {"h", "h", "h"});
  CHECK(m == std::vector<int64_t>{0, 18, 12, 18, 0, 12, 12, 12, 0});
  GpuTopology unknown;
  unknown.status = "libnvidia-ml.so.1 not found";
  CHECK(topology_line({gpu(5, "0000:bb:00.0", 18), unknown}, {"h", "h"}) ==
        "topology: rank 0 GPU 5 (NUMA 1, PCIe gen5 x16) no NVLink to another rank; rank 1 unknown (libnvidia-ml.so.1 not found)");
}
