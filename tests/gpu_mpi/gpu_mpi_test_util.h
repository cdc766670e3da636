// The World of a gpu_mpi test: MPI ranks with a selected GPU each.
#pragma once
#include <cuda_runtime.h>
#include <mpi.h>

#include "cuda/check/check_cuda.h"
#include "mpi/world/world.h"
#include "tests/catch.h"
#include "tests/mpi_test_util.h"

namespace vitddp_test {

/// The World of this process (rank and size in MPI_COMM_WORLD and in its shared-memory node),
/// with the CUDA device select_device() picks for it made current. FAILs the test when no CUDA
/// device is visible.
inline vitddp::World test_world() {
  vitddp::World w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.world_size);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &w.local_rank);
  MPI_Comm_size(local, &w.local_size);
  MPI_Comm_free(&local);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) FAIL("no CUDA device: this test needs 2 GPUs");
  CUDA_CHECK(cudaSetDevice(vitddp::select_device(w, n)));
  return w;
}

}  // namespace vitddp_test
