// The CPU backend's transports by name. A new one is one file under mpi/transports/ with its
// factory, plus one line here.
#include <stdexcept>

#include "mpi/transports/host_transport.h"

namespace vitddp {

const std::vector<HostTransportEntry>& host_transport_registry() {
  static const std::vector<HostTransportEntry> entries = {
      {"mpi", &make_mpi_transport},
  };
  return entries;
}

std::unique_ptr<HostTransport> make_host_transport(const std::string& name) {
  std::string choices;
  for (const HostTransportEntry& e : host_transport_registry()) {
    if (name == e.name) return e.make();
    choices += (choices.empty() ? "" : ", ") + std::string(e.name);
  }
  throw std::invalid_argument("unknown host transport '" + name + "' (choose one of: " + choices + ")");
}

}  // namespace vitddp
