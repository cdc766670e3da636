#include "cuda/kernels/patch_embed.h"

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/dtype.cuh"

namespace vitddp {
namespace {

int grid_for(size_t n, int threads) {
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>((n + threads - 1) / threads, 132 * 32)));
}

void check_geometry(const PatchGeometry& g, const char* what) {
  if (g.batch < 1 || g.channels < 1 || g.patch < 1 || g.image < g.patch ||
      g.image % g.patch != 0 || g.hidden < 1)
    throw std::invalid_argument(std::string(what) + ": bad geometry B=" + std::to_string(g.batch) +
                                " C=" + std::to_string(g.channels) + " H=" + std::to_string(g.image) +
                                " P=" + std::to_string(g.patch) + " D=" + std::to_string(g.hidden));
}

template <typename TP>
__global__ void im2col_kernel(const float* __restrict__ img, TP* __restrict__ patches, int B,
                              int C, int H, int P, int grid) {
  const int PP = P * P, cols = C * PP, Np = grid * grid;
  const size_t n = (size_t)B * Np * cols;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n;
       idx += (size_t)gridDim.x * blockDim.x) {
    const int col = (int)(idx % cols);
    const size_t row = idx / cols;
    const int b = (int)(row / Np), p = (int)(row % Np);
    const int i = p / grid, j = p % grid;
    const int c = col / PP, kh = (col / P) % P, kw = col % P;
    patches[idx] = from_f32<TP>(img[(((size_t)b * C + c) * H + (size_t)i * P + kh) * H + (size_t)j * P + kw]);
  }
}

__global__ void assemble_kernel(const float* __restrict__ emb, const float* __restrict__ cls,
                                const float* __restrict__ pos, float* __restrict__ h, int B,
                                int T, int D) {
  const size_t n = (size_t)B * T * D;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n;
       idx += (size_t)gridDim.x * blockDim.x) {
    const int d = (int)(idx % D);
    const size_t bt = idx / D;
    const int t = (int)(bt % T), b = (int)(bt / T);
    const float v = t == 0 ? cls[d] : emb[((size_t)b * (T - 1) + (t - 1)) * D + d];
    h[idx] = v + pos[(size_t)t * D + d];
  }
}

template <typename TE>
__global__ void assemble_backward_kernel(const float* __restrict__ dh, TE* __restrict__ demb,
                                         float* __restrict__ dcls, float* __restrict__ dpos,
                                         bool accumulate, int B, int T, int D) {
  const size_t n = (size_t)T * D;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n;
       idx += (size_t)gridDim.x * blockDim.x) {
    const int d = (int)(idx % D), t = (int)(idx / D);
    float s = 0.0f;
    for (int b = 0; b < B; ++b) {
      const float v = dh[((size_t)b * T + t) * D + d];
      s += v;
      if (t > 0) demb[((size_t)b * (T - 1) + (t - 1)) * D + d] = from_f32<TE>(v);
    }
    dpos[idx] = accumulate ? dpos[idx] + s : s;
    if (t == 0) dcls[d] = accumulate ? dcls[d] + s : s;
  }
}

}  // namespace

namespace {
template <typename TP>
void im2col_impl(const float* images, TP* patches, const PatchGeometry& g, cudaStream_t stream) {
  check_geometry(g, "patch_im2col");
  const size_t n = (size_t)g.batch * g.num_patches() * g.patch_dim();
  im2col_kernel<TP><<<grid_for(n, 256), 256, 0, stream>>>(images, patches, g.batch, g.channels,
                                                          g.image, g.patch, g.grid());
  CUDA_CHECK_LAUNCH();
}

template <typename TE>
void assemble_backward_impl(const float* dh, TE* demb, float* dclass, float* dpos, bool accumulate,
                            const PatchGeometry& g, cudaStream_t stream) {
  check_geometry(g, "assemble_tokens_backward");
  const size_t n = (size_t)g.seq_len() * g.hidden;
  assemble_backward_kernel<TE><<<grid_for(n, 256), 256, 0, stream>>>(
      dh, demb, dclass, dpos, accumulate, g.batch, g.seq_len(), g.hidden);
  CUDA_CHECK_LAUNCH();
}
}  // namespace

void patch_im2col(const float* images, float* patches, const PatchGeometry& g, cudaStream_t stream) {
  im2col_impl(images, patches, g, stream);
}

void patch_im2col(const float* images, __nv_bfloat16* patches, const PatchGeometry& g,
                  cudaStream_t stream) {
  im2col_impl(images, patches, g, stream);
}

void assemble_tokens(const float* emb, const float* class_token, const float* pos, float* h,
                     const PatchGeometry& g, cudaStream_t stream) {
  check_geometry(g, "assemble_tokens");
  const size_t n = (size_t)g.batch * g.seq_len() * g.hidden;
  assemble_kernel<<<grid_for(n, 256), 256, 0, stream>>>(emb, class_token, pos, h, g.batch,
                                                        g.seq_len(), g.hidden);
  CUDA_CHECK_LAUNCH();
}

void assemble_tokens_backward(const float* dh, float* demb, float* dclass, float* dpos,
                              bool accumulate, const PatchGeometry& g, cudaStream_t stream) {
  assemble_backward_impl(dh, demb, dclass, dpos, accumulate, g, stream);
}

void assemble_tokens_backward(const float* dh, __nv_bfloat16* demb, float* dclass, float* dpos,
                              bool accumulate, const PatchGeometry& g, cudaStream_t stream) {
  assemble_backward_impl(dh, demb, dclass, dpos, accumulate, g, stream);
}

}  // namespace vitddp
