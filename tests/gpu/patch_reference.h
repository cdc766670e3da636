// Host loops of the patch embedding's data movement, the reference of the fp32 and bf16
// patch_embed tests (cuda/kernels/patch_embed.h): im2col and the token assembly's backward.
#pragma once
#include <cstddef>
#include <vector>

#include "cuda/kernels/patch_embed.h"

namespace vitddp_test {

/// The small geometry the patch tests use: 3 images of 3 x 32 x 32, 8 x 8 patches, hidden 20.
inline vitddp::PatchGeometry small_patch_geometry() {
  vitddp::PatchGeometry g;
  g.batch = 3;
  g.channels = 3;
  g.image = 32;
  g.patch = 8;
  g.hidden = 20;
  return g;
}

/// im2col of NCHW `images`: [B*Np, C*P*P], as patch_im2col documents.
inline std::vector<float> host_im2col(const std::vector<float>& images, const vitddp::PatchGeometry& g) {
  const int B = g.batch, C = g.channels, HW = g.image, P = g.patch, G = g.grid(), Np = g.num_patches(),
            PD = g.patch_dim();
  std::vector<float> patches((size_t)B * Np * PD);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < G; ++i)
      for (int j = 0; j < G; ++j)
        for (int c = 0; c < C; ++c)
          for (int kh = 0; kh < P; ++kh)
            for (int kw = 0; kw < P; ++kw)
              patches[((size_t)b * Np + i * G + j) * PD + c * P * P + kh * P + kw] =
                  images[(((size_t)b * C + c) * HW + i * P + kh) * HW + j * P + kw];
  return patches;
}

/// Gradients of the token assembly h[b, t] = (t == 0 ? cls : emb[b, t-1]) + pos[t] for the
/// upstream gradient `dh` [B, T, D]: d emb [B*Np, D] (copied), d cls [D] and d pos [T, D]
/// (summed over the batch, in double).
struct TokenGrads {
  std::vector<float> demb;
  std::vector<double> dcls, dpos;
};
inline TokenGrads host_assemble_tokens_backward(const std::vector<float>& dh, const vitddp::PatchGeometry& g) {
  const int B = g.batch, D = g.hidden, Np = g.num_patches(), T = g.seq_len();
  TokenGrads r{std::vector<float>((size_t)B * Np * D), std::vector<double>(D, 0), std::vector<double>((size_t)T * D, 0)};
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int d = 0; d < D; ++d) {
        const float v = dh[((size_t)b * T + t) * D + d];
        r.dpos[(size_t)t * D + d] += v;
        if (t == 0) r.dcls[d] += v;
        else r.demb[((size_t)b * Np + t - 1) * D + d] = v;
      }
  return r;
}

}  // namespace vitddp_test
