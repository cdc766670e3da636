#include "cuda/gelu.h"

#include <algorithm>
#include <cstdint>

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

// Vectorised bodies (float4) when n and every pointer allow it; scalar tails otherwise.
__global__ void gelu_forward_kernel(const float* u, float* y, size_t n, bool vec4) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t start = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (vec4) {
    const size_t n4 = n / 4;
    for (size_t i = start; i < n4; i += stride) {
      float4 v = reinterpret_cast<const float4*>(u)[i];
      v.x = gelu(v.x);
      v.y = gelu(v.y);
      v.z = gelu(v.z);
      v.w = gelu(v.w);
      reinterpret_cast<float4*>(y)[i] = v;
    }
    start += n4 * 4;
  }
  for (size_t i = start; i < n; i += stride) y[i] = gelu(u[i]);
}

__global__ void gelu_backward_kernel(const float* dy, const float* u, float* du, size_t n,
                                     bool vec4) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t start = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (vec4) {
    const size_t n4 = n / 4;
    for (size_t i = start; i < n4; i += stride) {
      const float4 g = reinterpret_cast<const float4*>(dy)[i];
      const float4 v = reinterpret_cast<const float4*>(u)[i];
      float4 r;
      r.x = g.x * gelu_grad(v.x);
      r.y = g.y * gelu_grad(v.y);
      r.z = g.z * gelu_grad(v.z);
      r.w = g.w * gelu_grad(v.w);
      reinterpret_cast<float4*>(du)[i] = r;
    }
    start += n4 * 4;
  }
  for (size_t i = start; i < n; i += stride) du[i] = dy[i] * gelu_grad(u[i]);
}

// bf16: 8 values (16 bytes) per vector access.
union Pack8 {
  uint4 u;
  __nv_bfloat162 h[4];
};

__global__ void gelu_forward_bf16_kernel(const __nv_bfloat16* u, __nv_bfloat16* y, size_t n,
                                         bool vec8) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t start = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (vec8) {
    const size_t n8 = n / 8;
    for (size_t i = start; i < n8; i += stride) {
      Pack8 v;
      v.u = reinterpret_cast<const uint4*>(u)[i];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __bfloat1622float2(v.h[j]);
        v.h[j] = __floats2bfloat162_rn(gelu(f.x), gelu(f.y));
      }
      reinterpret_cast<uint4*>(y)[i] = v.u;
    }
    start += n8 * 8;
  }
  for (size_t i = start; i < n; i += stride) y[i] = __float2bfloat16_rn(gelu(__bfloat162float(u[i])));
}

__global__ void gelu_backward_bf16_kernel(const __nv_bfloat16* dy, const __nv_bfloat16* u,
                                          __nv_bfloat16* du, size_t n, bool vec8) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t start = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (vec8) {
    const size_t n8 = n / 8;
    for (size_t i = start; i < n8; i += stride) {
      Pack8 g, v, r;
      g.u = reinterpret_cast<const uint4*>(dy)[i];
      v.u = reinterpret_cast<const uint4*>(u)[i];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 gf = __bfloat1622float2(g.h[j]), vf = __bfloat1622float2(v.h[j]);
        r.h[j] = __floats2bfloat162_rn(gf.x * gelu_grad(vf.x), gf.y * gelu_grad(vf.y));
      }
      reinterpret_cast<uint4*>(du)[i] = r.u;
    }
    start += n8 * 8;
  }
  for (size_t i = start; i < n; i += stride)
    du[i] = __float2bfloat16_rn(__bfloat162float(dy[i]) * gelu_grad(__bfloat162float(u[i])));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

int grid_for(size_t n, int threads) {
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>((n + threads - 1) / threads, 132 * 32)));
}

}  // namespace

void gelu_forward(const float* u, float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec4 = aligned16(u) && aligned16(y);
  gelu_forward_kernel<<<grid_for(vec4 ? n / 4 + 1 : n, 256), 256, 0, stream>>>(u, y, n, vec4);
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(const float* dy, const float* u, float* du, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec4 = aligned16(dy) && aligned16(u) && aligned16(du);
  gelu_backward_kernel<<<grid_for(vec4 ? n / 4 + 1 : n, 256), 256, 0, stream>>>(dy, u, du, n, vec4);
  CUDA_CHECK_LAUNCH();
}

void gelu_forward(const __nv_bfloat16* u, __nv_bfloat16* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec8 = aligned16(u) && aligned16(y);
  gelu_forward_bf16_kernel<<<grid_for(vec8 ? n / 8 + 1 : n, 256), 256, 0, stream>>>(u, y, n, vec8);
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(const __nv_bfloat16* dy, const __nv_bfloat16* u, __nv_bfloat16* du, size_t n,
                   cudaStream_t stream) {
  if (n == 0) return;
  const bool vec8 = aligned16(dy) && aligned16(u) && aligned16(du);
  gelu_backward_bf16_kernel<<<grid_for(vec8 ? n / 8 + 1 : n, 256), 256, 0, stream>>>(dy, u, du, n,
                                                                                      vec8);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
