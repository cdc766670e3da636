#include "cuda/kernels/eval_metrics.h"

#include <stdexcept>
#include <string>

#include "cuda/kernels/block_reduce.cuh"
#include "cuda/check/check_cuda.h"

namespace vitddp {
namespace {

constexpr int kThreads = 256;  // 8 warps: 8 rows per block

__global__ void eval_row_metrics_kernel(const float* __restrict__ logits, const int32_t* __restrict__ labels,
                                        int batch, int classes, float* __restrict__ row_loss,
                                        int32_t* __restrict__ row_correct) {
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= batch) return;  // whole warps leave together
  const float* z = logits + (size_t)row * classes;
  // Each lane: its maximum and the first index holding it (indices increase along the loop).
  float m = -INFINITY;
  int arg = classes;  // "none yet": loses every tie
  for (int k = lane; k < classes; k += 32) {
    const float v = z[k];
    if (v > m || (arg == classes && v == m)) {
      m = v;
      arg = k;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, m, o);
    const int oa = __shfl_xor_sync(0xffffffffu, arg, o);
    if (om > m || (om == m && oa < arg)) {
      m = om;
      arg = oa;
    }
  }
  float s = 0.0f;
  for (int k = lane; k < classes; k += 32) s += expf(z[k] - m);
  s = warp_sum(s);
  if (lane == 0) {
    const int label = labels[row];
    const bool valid = label >= 0 && label < classes;
    row_loss[row] = valid ? logf(s) + m - z[label] : NAN;
    row_correct[row] = valid && arg == label ? 1 : 0;
  }
}

}  // namespace

void eval_row_metrics(const float* logits, const int32_t* labels, int batch, int classes, float* row_loss,
                      int32_t* row_correct, cudaStream_t stream) {
  if (batch < 1 || classes < 1)
    throw std::invalid_argument("eval_row_metrics: bad shape batch=" + std::to_string(batch) +
                                " classes=" + std::to_string(classes));
  const int rows_per_block = kThreads / 32;
  const int blocks = (batch + rows_per_block - 1) / rows_per_block;
  eval_row_metrics_kernel<<<blocks, kThreads, 0, stream>>>(logits, labels, batch, classes, row_loss, row_correct);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
