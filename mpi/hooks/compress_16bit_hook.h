// The common body of fp16_compress_hook and bf16_compress_hook (PyTorch default_hooks.py):
// mpi/hooks/fp16_compress_hook.cpp and bf16_compress_hook.cpp register it with their dtype.
#pragma once
#include <memory>

#include "mpi/hooks/comm_hook.h"

namespace vitddp {

/// The bucket divided by the world size while cast to `t` (F16 or BF16) into the bucket's 16-bit
/// staging, all-reduced with SUM in `t`, cast back into the fp32 bucket; with a transport that
/// fuses the casts (the copy engine), its fused path. Timings: compress = the casts, allreduce =
/// the 16-bit all-reduce (2 bytes per element), compressed = 1.
std::unique_ptr<CommHook> make_compress_16bit_hook(DType t);

}  // namespace vitddp
