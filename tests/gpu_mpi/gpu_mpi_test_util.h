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
  vitddp::World w = node_world();
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) FAIL("no CUDA device: this test needs 2 GPUs");
  CUDA_CHECK(cudaSetDevice(vitddp::select_device(w, n)));
  return w;
}

}  // namespace vitddp_test
