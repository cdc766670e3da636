// The NVML half of src/engines/topology.h. NVML (libnvidia-ml.so.1) ships with the driver, not with every
// toolkit, so it is loaded at run time (dlopen) and the few entry points used are declared here
// with NVML's stable C ABI (nvml.h: nvmlReturn_t is an int, NVML_SUCCESS 0, nvmlPciInfo_t as
// below). A machine without the driver library degrades to "libnvidia-ml.so.1 not found".
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "src/engines/topology.h"

namespace vitddp {
namespace {

// nvml.h's declarations (NVML API 12/13), only those used.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kNvmlFeatureEnabled = 1;        // nvmlEnableState_t NVML_FEATURE_ENABLED
constexpr int kNvlinkDeviceGpu = 0;           // nvmlIntNvLinkDeviceType_t NVML_NVLINK_DEVICE_TYPE_GPU
constexpr int kNvlinkDeviceSwitch = 2;        // NVML_NVLINK_DEVICE_TYPE_SWITCH
constexpr unsigned kNvlinkMaxLinks = 18;      // NVML_NVLINK_MAX_LINKS

/// "0000:19:00.0" / "00000000:19:00.0" (CUDA's, NVML's) as "0000:19:00.0", lower case; "" if unparsable.
std::string normal_bus_id(const char* id) {
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) return "";
  char out[32];
  std::snprintf(out, sizeof out, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
  return out;
}

/// libnvidia-ml.so.1, initialised; unloaded (nvmlShutdown, dlclose) on destruction.
class Nvml {
 public:
  Nvml() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) { error_ = "libnvidia-ml.so.1 not found"; return; }
    auto init = sym<nvmlReturn_t (*)()>("nvmlInit_v2");
    if (!init) { error_ = "libnvidia-ml.so.1 lacks nvmlInit_v2"; return; }
    if (const nvmlReturn_t rc = init(); rc != kNvmlSuccess) { error_ = "nvmlInit: " + message(rc); return; }
    ready_ = true;
  }
  ~Nvml() {
    if (ready_) if (auto down = sym<nvmlReturn_t (*)()>("nvmlShutdown")) down();
    if (lib_) dlclose(lib_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  const std::string& error() const { return error_; }
  template <class F> F sym(const char* name) const { return lib_ ? reinterpret_cast<F>(dlsym(lib_, name)) : nullptr; }
  std::string message(nvmlReturn_t rc) const {
    auto str = sym<const char* (*)(nvmlReturn_t)>("nvmlErrorString");
    return str ? str(rc) : "NVML error " + std::to_string(rc);
  }
  /// Calls `name`(args...) if the library has it; false when missing or not NVML_SUCCESS.
  template <class... A> bool call(const char* name, A... args) const {
    auto f = sym<nvmlReturn_t (*)(A...)>(name);
    return f && f(args...) == kNvmlSuccess;
  }

 private:
  void* lib_ = nullptr;
  bool ready_ = false;
  std::string error_;
};

int sysfs_numa_node(const std::string& bus_id) {
  std::ifstream in("/sys/bus/pci/devices/" + bus_id + "/numa_node");
  int node = -1;
  return in >> node ? node : -1;
}

}  // namespace

GpuTopology query_gpu_topology(int device) {
  GpuTopology t;
  t.device = device;
  char cuda_bus[32] = {0};
  if (const cudaError_t e = cudaDeviceGetPCIBusId(cuda_bus, sizeof cuda_bus, device); e != cudaSuccess) {
    t.status = std::string("cudaDeviceGetPCIBusId: ") + cudaGetErrorString(e);
    return t;
  }
  t.pci_bus_id = normal_bus_id(cuda_bus);
  t.numa_node = sysfs_numa_node(t.pci_bus_id);
  const Nvml nvml;
  if (!nvml.error().empty()) { t.status = nvml.error(); return t; }
  nvmlDevice_t dev = nullptr;
  auto by_bus = nvml.sym<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>("nvmlDeviceGetHandleByPciBusId_v2");
  if (!by_bus) { t.status = "libnvidia-ml.so.1 lacks nvmlDeviceGetHandleByPciBusId_v2"; return t; }
  if (const nvmlReturn_t rc = by_bus(cuda_bus, &dev); rc != kNvmlSuccess) {
    t.status = "nvmlDeviceGetHandleByPciBusId: " + nvml.message(rc);
    return t;
  }
  unsigned v = 0;
  if (nvml.call("nvmlDeviceGetNumaNodeId", dev, &v)) t.numa_node = (int)v;
  if (nvml.call("nvmlDeviceGetCurrPcieLinkGeneration", dev, &v)) t.pcie_gen = (int)v;
  if (nvml.call("nvmlDeviceGetCurrPcieLinkWidth", dev, &v)) t.pcie_width = (int)v;
  if (nvml.call("nvmlDeviceGetMaxPcieLinkGeneration", dev, &v)) t.pcie_max_gen = (int)v;
  if (nvml.call("nvmlDeviceGetMaxPcieLinkWidth", dev, &v)) t.pcie_max_width = (int)v;
  std::map<std::string, int> peers;  // remote GPU bus id -> active links
  for (unsigned link = 0; link < kNvlinkMaxLinks; ++link) {
    int state = 0, type = kNvlinkDeviceGpu;
    if (!nvml.call("nvmlDeviceGetNvLinkState", dev, link, &state) || state != kNvmlFeatureEnabled) continue;
    nvml.call("nvmlDeviceGetNvLinkRemoteDeviceType", dev, link, &type);
    nvmlPciInfo_t pci{};
    if (type == kNvlinkDeviceSwitch) ++t.nvlink_switch_links;
    else if (type == kNvlinkDeviceGpu && nvml.call("nvmlDeviceGetNvLinkRemotePciInfo_v2", dev, link, &pci))
      ++peers[normal_bus_id(pci.busId)];
  }
  t.nvlink_gpu_links.assign(peers.begin(), peers.end());
  t.status = "ok";
  return t;
}

}  // namespace vitddp
