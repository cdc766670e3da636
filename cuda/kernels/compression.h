// Kernels of the gradient compression comm hooks (mpi/hooks/: compress_16bit_hook, powersgd_gpu): 16-bit
// casts (fp16_compress_hook / bf16_compress_hook), PowerSGD's low-rank products, Gram-Schmidt
// orthogonalisation, error feedback, gather/scatter of uncompressed tensors, random initial Qs.
// All matrices are fp32 row-major; every function only enqueues work on `stream` (no host
// synchronisation) and throws std::runtime_error on a launch failure (cuda/check/check_cuda.h).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "model/dtype.h"

namespace vitddp {

/// out[i] = t(x[i] / divisor) for i < n: IEEE binary16 (__float2half_rn, t = F16) or bfloat16
/// (__float2bfloat16_rn, t = BF16) bits, the division done in fp32 before the single rounding.
/// Throws std::invalid_argument for t = F32.
void cast_to_16bit(const float* x, size_t n, float divisor, DType t, uint16_t* out, cudaStream_t stream);
/// x[i] = float(h[i]) for i < n (exact); h holds bits of t (F16 or BF16, else std::invalid_argument).
void cast_from_16bit(const uint16_t* h, size_t n, DType t, float* x, cudaStream_t stream);

/// Error feedback, start: x[i] += err[i] (skipped when err is null), then copy[i] = x[i].
void add_error_and_copy(float* x, const float* err, float* copy, size_t n, cudaStream_t stream);
/// out[i] = a[i] - b[i] (error feedback, end: error = input copy - decompressed bucket).
void subtract(const float* a, const float* b, float* out, size_t n, cudaStream_t stream);
/// x[i] /= divisor (a true division, as torch's div_).
void divide(float* x, size_t n, float divisor, cudaStream_t stream);

/// One contiguous run of a gather or scatter: dst[dst_offset + i] = src[src_offset + i] / divisor
/// for i < len.
struct CopySegment {
  uint64_t src_offset, dst_offset, len;
};
/// Applies `count` segments (a device array) at once; `max_len` bounds every len (grid sizing).
/// divisor 1 copies exactly. Segments must not overlap in dst; src and dst must not alias.
void copy_segments(const float* src, float* dst, const CopySegment* segments, int count, size_t max_len,
                   float divisor, cudaStream_t stream);

/// x[i] = float(rand_normal(seed, stream_id, i)) for i < n (model/rng.h; the host implementation
/// draws the same numbers up to the last bit of the double).
void fill_normal(float* x, size_t n, uint64_t seed, uint64_t stream_id, cudaStream_t stream);

/// A (rows x cols) row-major matrix at `offset` elements from a base pointer.
struct MatrixRef {
  uint64_t offset;
  int rows, cols;
};
/// Gram-Schmidt on the columns of each of `count` matrices (a device array of MatrixRef, all at
/// `base`): for column i in order, col /= (||col|| + epsilon) (epsilon 0: col /= ||col||), then
/// every later column j loses (col . col_j) col. One thread block per matrix, fp32 sums.
void orthogonalize_columns(float* base, const MatrixRef* matrices, int count, float epsilon, cudaStream_t stream);

/// P[n,r] = M[n,m] Q[m,r] (fp32; one warp per row of M).
void matmul_mq(const float* M, const float* Q, float* P, int n, int m, int r, cudaStream_t stream);
/// Floats of scratch matmul_mtp needs for these sizes.
size_t matmul_mtp_scratch_floats(int n, int m, int r);
/// Q[m,r] = M[n,m]^T P[n,r] (fp32; deterministic two-stage column reduction through `scratch`).
void matmul_mtp(const float* M, const float* P, float* Q, int n, int m, int r, float* scratch, cudaStream_t stream);
/// M[n,m] = P[n,r] Q[m,r]^T (fp32; overwrites M).
void matmul_pqt(const float* P, const float* Q, float* M, int n, int m, int r, cudaStream_t stream);

}  // namespace vitddp
