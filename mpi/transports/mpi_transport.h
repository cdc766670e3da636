// The MPI transport of the CPU backend (CUDA-free): MPI_Iallreduce / MPI_Allreduce over
// MPI_COMM_WORLD, with user-defined ops for the 16-bit payloads; MPI_Ireduce_scatter and
// MPI_Iallgatherv for ZeRO-1 (--shard-optimizer), both in place (MPI_IN_PLACE).
#pragma once
#include <mpi.h>

#include "model/dtype.h"

namespace vitddp {

/// User-defined MPI reduction ops that sum 16-bit floats the way NCCL does per reduction step:
/// each pair is added in fp32 and the sum rounded back to 16 bits. Use with MPI_UINT16_T buffers.
/// Created with MPI_Op_create in the constructor, freed in the destructor (not after MPI_Finalize).
/// Throws std::runtime_error on MPI failure.
class Mpi16BitSumOps {
 public:
  Mpi16BitSumOps();
  ~Mpi16BitSumOps();
  Mpi16BitSumOps(const Mpi16BitSumOps&) = delete;
  Mpi16BitSumOps& operator=(const Mpi16BitSumOps&) = delete;
  /// The op for `t` (F16 or BF16; else std::invalid_argument).
  MPI_Op op(DType t) const;

 private:
  MPI_Op fp16_ = MPI_OP_NULL, bf16_ = MPI_OP_NULL;
};

/// The MPI datatype of the elements of `t`: MPI_FLOAT, or MPI_UINT16_T for the 16-bit bits.
MPI_Datatype mpi_datatype(DType t);

}  // namespace vitddp
