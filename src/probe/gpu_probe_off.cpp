// The GPU probe in the CPU-only build (CMakeLists.txt compiles this file instead of
// gpu_probe_gpu.cpp): no GPU transport exists, so parse_options refuses their names first.
#include <stdexcept>

#include "src/probe/probe.h"

namespace vitddp::probe {

std::vector<std::string> gpu_transport_names() { return {}; }

ProbeResult run_gpu_probe(const ProbeOptions&, const World&, const std::vector<int64_t>&) {
  throw std::logic_error("vitddp-probe: this build has no GPU backend (VITDDP_GPU=OFF)");
}

}  // namespace vitddp::probe
