// Transports of the CPU backend (CUDA-free): a process group over host memory, in the vocabulary
// of c10d's ProcessGroup (allreduce, reduce_scatter, allgather) and Work. Registered by --allreduce-style name in
// mpi/transports/host_registry.cpp; the CPU reducer uses "mpi" (mpi/transports/mpi_transport.h).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "model/dtype.h"

namespace vitddp {

/// An all-reduce in flight (c10d::Work): wait() blocks until its result is in place.
class HostWork {
 public:
  virtual ~HostWork() = default;
  /// Throws std::runtime_error on a communication failure.
  virtual void wait() = 0;
};

/// Sums over the ranks of host buffers, and ZeRO-1's reduce-scatter and all-gather
/// (--shard-optimizer). 16-bit payloads (raw bits) are summed as NCCL does per reduction step:
/// each pair added in fp32, the sum rounded back to the 16-bit type.
class HostTransport {
 public:
  virtual ~HostTransport() = default;
  /// The registry name.
  virtual const char* name() const = 0;
  virtual int world_size() const = 0;
  /// This process's rank among world_size().
  virtual int rank() const = 0;
  /// Starts `data` (count elements of `t`) = the sum over ranks, in place; the result is there
  /// once the returned work's wait() returned. Throws std::invalid_argument for a count the
  /// transport cannot address, std::runtime_error on failure.
  virtual std::unique_ptr<HostWork> start_sum(void* data, size_t count, DType t) = 0;
  /// The same, blocking.
  virtual void sum(void* data, size_t count, DType t) = 0;
  /// Starts a reduce-scatter (MPI_Reduce_scatter with MPI_SUM) in place: `data` holds
  /// counts[0] + ... + counts[N-1] elements of `t`, cut in that order into one contiguous chunk per
  /// rank; once wait() returned, this rank's chunk of `data` (counts[rank()] elements from
  /// counts[0] + ... + counts[rank() - 1]) holds the sum over the ranks of that chunk, and the
  /// other chunks are undefined. A count may be 0. `data` stays untouched by the caller until
  /// wait() returned. Throws as start_sum.
  virtual std::unique_ptr<HostWork> start_reduce_scatter(void* data, const std::vector<size_t>& counts, DType t) = 0;
  /// Starts an all-gather in place (MPI_Allgatherv with MPI_IN_PLACE): rank r's counts[r] elements
  /// of `t` at data + displs[r] (elements) land at the same place on every rank. Throws as start_sum.
  virtual std::unique_ptr<HostWork> start_all_gather(void* data, const std::vector<size_t>& counts,
                                                     const std::vector<size_t>& displs, DType t) = 0;
};

/// A registry entry: name and factory (the world size is the transport's own).
struct HostTransportEntry {
  const char* name;
  std::unique_ptr<HostTransport> (*make)();
};

/// The registered host transports ("mpi").
const std::vector<HostTransportEntry>& host_transport_registry();
/// The transport registered as `name`. Throws std::invalid_argument "unknown host transport 'x'
/// (choose one of: mpi)" for any other name; what the factory throws otherwise.
std::unique_ptr<HostTransport> make_host_transport(const std::string& name);

}  // namespace vitddp
