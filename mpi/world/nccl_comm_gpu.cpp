#include "mpi/world/nccl_comm_gpu.h"

#include "mpi/world/nccl_check_gpu.h"

namespace vitddp {

NcclComm::NcclComm(const World& w, int max_ctas) {
  ncclUniqueId id;
  if (w.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  if (max_ctas > 0) {
    config.maxCTAs = max_ctas;
    config.minCTAs = 1;
  }
  NCCL_CHECK(ncclCommInitRankConfig(&comm_, w.world_size, id, w.rank, &config));
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(comm_);
}

void NcclComm::abort() {
  if (!comm_) return;
  ncclComm_t c = comm_;
  comm_ = nullptr;
  aborted_ = true;
  NCCL_CHECK(ncclCommAbort(c));
}

void NcclComm::check_async_error() const {
  if (!comm_) return;
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
  if (async != ncclSuccess && async != ncclInProgress)
    throw std::runtime_error(launcher_rank_label() + ": NCCL asynchronous error: " + ncclGetErrorString(async));
}

std::string nccl_version_string() {
  int v = 0;
  NCCL_CHECK(ncclGetVersion(&v));
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z for versions >= 2.9
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

}  // namespace vitddp
