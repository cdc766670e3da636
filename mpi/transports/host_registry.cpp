// The CPU backend's transports by name. A new one is one file under mpi/transports/ defining its
// factory `std::unique_ptr<HostTransport> make_..._transport()`, plus one line in the list.
#include <stdexcept>

#include "mpi/transports/host_transport.h"

// X(name, factory).
#define VITDDP_HOST_TRANSPORTS(X) \
  X("mpi", make_mpi_transport)

namespace vitddp {

#define VITDDP_DECLARE_TRANSPORT(name, factory) std::unique_ptr<HostTransport> factory();
VITDDP_HOST_TRANSPORTS(VITDDP_DECLARE_TRANSPORT)
#undef VITDDP_DECLARE_TRANSPORT

const std::vector<HostTransportEntry>& host_transport_registry() {
#define VITDDP_TRANSPORT_ENTRY(name, factory) {name, &factory},
  static const std::vector<HostTransportEntry> entries = {VITDDP_HOST_TRANSPORTS(VITDDP_TRANSPORT_ENTRY)};
#undef VITDDP_TRANSPORT_ENTRY
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
