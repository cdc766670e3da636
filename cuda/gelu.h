// Exact (erf) GELU, torch.nn.GELU(approximate='none'), elementwise in fp32 arithmetic on fp32 or
// bf16 storage, on a stream. (cuBLASLt's GELU epilogue is the tanh approximation, so it is not
// used: the model keeps torchvision's exact GELU.)
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace vitddp {

/// y[i] = 0.5 * u[i] * (1 + erf(u[i] / sqrt(2))) for i < n. u and y: n floats (may alias).
void gelu_forward(const float* u, float* y, size_t n, cudaStream_t stream);

/// du[i] = dy[i] * GELU'(u[i]), GELU'(u) = Phi(u) + u * phi(u) (standard normal cdf / pdf), for
/// i < n. du may alias dy (in place).
void gelu_backward(const float* dy, const float* u, float* du, size_t n, cudaStream_t stream);

/// bf16 storage (what autocast does for nn.GELU on a bf16 tensor): each value is widened to fp32,
/// transformed in fp32 and rounded once to bf16. Same aliasing rules as the fp32 versions.
/// Vectorised (8 values per access) when n and the pointers allow it.
void gelu_forward(const __nv_bfloat16* u, __nv_bfloat16* y, size_t n, cudaStream_t stream);
void gelu_backward(const __nv_bfloat16* dy, const __nv_bfloat16* u, __nv_bfloat16* du, size_t n,
                   cudaStream_t stream);

}  // namespace vitddp
