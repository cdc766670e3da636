// Exact (erf) GELU, torch.nn.GELU(approximate='none'), fp32 elementwise, on a stream.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace vitddp {

/// y[i] = 0.5 * u[i] * (1 + erf(u[i] / sqrt(2))) for i < n. u and y: n floats (may alias).
void gelu_forward(const float* u, float* y, size_t n, cudaStream_t stream);

/// du[i] = dy[i] * GELU'(u[i]), GELU'(u) = Phi(u) + u * phi(u) (standard normal cdf / pdf), for
/// i < n. du may alias dy (in place).
void gelu_backward(const float* dy, const float* u, float* du, size_t n, cudaStream_t stream);

}  // namespace vitddp
