#include "cuda/gelu.h"

#include <algorithm>

#include "cuda/check.h"

namespace vitddp {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

__device__ __forceinline__ float gelu(float u) { return 0.5f * u * (1.0f + erff(u * kInvSqrt2)); }

__device__ __forceinline__ float gelu_grad(float u) {
  const float cdf = 0.5f * (1.0f + erff(u * kInvSqrt2));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * u * u);
  return fmaf(u, pdf, cdf);
}

__global__ void gelu_forward_kernel(const float* u, float* y, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] = gelu(u[i]);
}

__global__ void gelu_backward_kernel(const float* dy, const float* u, float* du, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    du[i] = dy[i] * gelu_grad(u[i]);
}

int grid_for(size_t n, int threads) {
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>((n + threads - 1) / threads, 132 * 32)));
}

}  // namespace

void gelu_forward(const float* u, float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n, 256), 256, 0, stream>>>(u, y, n);
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(const float* dy, const float* u, float* du, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dy, u, du, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
