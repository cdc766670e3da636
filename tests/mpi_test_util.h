// Helpers shared by the tests run under `mpirun` (mpi_tests, gpu_mpi_tests): this process's rank
// and the world size in MPI_COMM_WORLD, its World (node_world), and the host emulation of the 16-bit hooks' two-rank
// average. No CUDA header (the GPU tests' World is tests/gpu_mpi/gpu_mpi_test_util.h).
#pragma once
#include <mpi.h>

#include <stdexcept>
#include <string>

#include "mpi/hooks/half_host.h"
#include "mpi/world/world.h"
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

/// This process's World: rank and size in MPI_COMM_WORLD and in its shared-memory node
/// (MPI_Comm_split_type, as the trainer's start-up finds the local rank). No device is selected.
inline vitddp::World node_world() {
  vitddp::World w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.world_size);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &w.local_rank);
  MPI_Comm_size(local, &w.local_size);
  MPI_Comm_free(&local);
  return w;
}

/// The fp16/bf16 compression hook's average of two ranks' values `a` and `b` (PyTorch
/// fp16_compress_hook / bf16_compress_hook): each divided by 2 and rounded to 16 bits, the two
/// added in fp32 and the sum rounded to 16 bits once, widened back. With two ranks that is NCCL's
/// 16-bit ring, the MPI reducer's user op and the copy-engine sum alike. `c`: the compression,
/// "fp16" or "bf16" (else std::invalid_argument).
inline float two_rank_16bit_average(const std::string& c, float a, float b) {
  using namespace vitddp;
  if (c == "bf16")
    return bf16_to_float(float_to_bf16(bf16_to_float(float_to_bf16(a / 2)) + bf16_to_float(float_to_bf16(b / 2))));
  if (c == "fp16")
    return fp16_to_float(float_to_fp16(fp16_to_float(float_to_fp16(a / 2)) + fp16_to_float(float_to_fp16(b / 2))));
  throw std::invalid_argument("two_rank_16bit_average: compression must be fp16 or bf16");
}

}  // namespace vitddp_test
