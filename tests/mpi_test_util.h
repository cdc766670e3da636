// Helpers shared by the tests run under `mpirun` (mpi_tests, gpu_mpi_tests): this process's rank
// and the world size in MPI_COMM_WORLD, and the World (with a selected GPU) of a gpu_mpi test.
#pragma once
#include <cuda_runtime.h>
#include <mpi.h>

#include "cuda/check.h"
#include "mpi/world.h"
#include "tests/catch.h"

namespace vitddp_test {

/// This process's rank in MPI_COMM_WORLD.
inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/// The number of processes in MPI_COMM_WORLD.
inline int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

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
