// The one kernel of the copy-engine all-reduce (mpi/transports/copy_engine_allreduce_gpu.h): the owner of a chunk adds the
// copies its peers put in its scratch buffer. Everything else that all-reduce does is copies.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "model/dtype.h"

namespace vitddp {

/// chunk[i] = round_T((chunk[i] + sum_{k < slots} scratch[k * slot_stride + i]) * scale) for
/// i < n: the sum in fp32, in slot order, one rounding to T at the end (exact for two fp32
/// addends; NCCL's bf16 ring rounds after each addition, which is the same for two ranks).
/// `chunk` and `scratch` hold elements of `t` (the fp32 gradients, or the
/// raw 16-bit bits of the fp16/bf16 compression hooks' payload); `slot_stride` is in elements. `scratch` must have
/// `chunk`'s address modulo 16 and slot_stride * bytes a multiple of 16 (16-byte vector accesses
/// between a scalar head and tail). Short-lived blocks
/// (a few microseconds each), so the kernel never holds SMs the way a persistent kernel does.
/// When `nonfinite` (a device int) is given, any result that is NaN or infinite after rounding
/// sets it to 1 (it is never cleared here): the all-reduce's owner of each chunk checks it in the
/// same pass, so the optimizer's separate pass over all gradients is not needed.
/// Only enqueues on `stream`; throws std::runtime_error on a launch error.
void ce_sum_chunk(void* chunk, const void* scratch, size_t n, int slots, size_t slot_stride, float scale, DType t,
                  cudaStream_t stream, int* nonfinite = nullptr);

/// The sum of the fp16/bf16 compression hooks (PyTorch fp16_compress_hook / bf16_compress_hook)
/// for the chunk a rank owns, with the hook's two casts fused into it, so the own chunk is never
/// cast into a staging buffer first nor cast back from it afterwards. For i < n:
///   own = round_T(x[i] / divisor); r = round_T(float(own) + sum_{k < slots} float(scratch[k * slot_stride + i]))
///   out16[i] = r (the payload the all-gather sends); x[i] = float(r) (the decompressed value).
/// Bit-identical to cast_to_16bit (cuda/kernels/compression.h) of the chunk, ce_sum_chunk with scale 1,
/// then cast_from_16bit. `x`: n fp32; `out16` and `scratch`: raw bits of `t` (F16 or BF16; else
/// std::invalid_argument); `slot_stride` in elements. 16-byte vector accesses when x, out16 and
/// scratch are 16-byte aligned and slot_stride is a multiple of 8; element by element otherwise.
/// When `nonfinite` is given, any r that is NaN or infinite sets it to 1.
/// Only enqueues on `stream`; throws std::runtime_error on a launch error.
void ce_sum_chunk_16bit(float* x, uint16_t* out16, const uint16_t* scratch, size_t n, int slots, size_t slot_stride,
                        float divisor, DType t, cudaStream_t stream, int* nonfinite = nullptr);

/// *flag = 1 when any of flags_in[0..n) is non-zero; unchanged otherwise. One thread.
void ce_or_flags(const int* flags_in, int n, int* flag, cudaStream_t stream);

/// *out = max(slots[0..n)) (n >= 1; `out` may be one of the slots): the copy engine's
/// max_over_ranks once every rank's value is in its slot. One thread.
void ce_max_slots(const int* slots, int n, int* out, cudaStream_t stream);

}  // namespace vitddp
