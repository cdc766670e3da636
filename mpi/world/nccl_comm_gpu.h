// NCCL communicator bootstrapped over MPI.
#pragma once
#include <nccl.h>

#include <string>

#include "mpi/world/world.h"

namespace vitddp {

/// Owns an NCCL communicator over MPI_COMM_WORLD: rank 0 calls ncclGetUniqueId, MPI_Bcast sends
/// the id to all ranks, every rank calls ncclCommInitRank(world_size, id, rank) on its current
/// CUDA device. Destruction calls ncclCommDestroy. Errors throw std::runtime_error (NCCL_CHECK).
/// `max_ctas` > 0 caps the thread blocks (and so the SMs) NCCL's kernels may take from compute
/// while they overlap backward (ncclConfig_t::maxCTAs, ncclCommInitRankConfig); 0 = NCCL's choice.
class NcclComm {
 public:
  explicit NcclComm(const World& w, int max_ctas = 0);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  /// The communicator; nullptr after abort().
  ncclComm_t get() const { return comm_; }
  /// Throws if the communicator reports an asynchronous error (a peer died, a network error).
  /// After abort() there is nothing to ask: returns.
  void check_async_error() const;
  /// ncclCommAbort: ends this rank's in-flight operations and frees the communicator (fault
  /// injection; what a watchdog does to a hung communicator). Not thread-safe against
  /// check_async_error; throws std::runtime_error on failure.
  void abort();
  /// True once abort() was called.
  bool aborted() const { return aborted_; }

 private:
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
};

/// "2.28.3" from ncclGetVersion.
std::string nccl_version_string();

}  // namespace vitddp
