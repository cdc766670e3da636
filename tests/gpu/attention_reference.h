// The double-precision host reference of the attention kernels (cuda/kernels/attention.h) and of cuDNN's
// fused attention (cuda/kernels/cudnn_attention.h), shared by their tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace vitddp_test {

/// Double-precision attention on the packed layout of cuda/kernels/attention.h (qkv [B*T, 3D] with Q, K,
/// V column blocks, heads of dh columns; dout [B*T, D]): probs [B, H, T, T] (softmax of the
/// scores scaled by 1/sqrt(dh)), out [B*T, D], lse [B, H, T] (natural log-sum-exp of the scaled
/// scores), dqkv [B*T, 3D]. Softmax backward as dS = P * (dP - rowsum(P * dP)).
struct AttentionRef {
  std::vector<double> probs, out, lse, dqkv;
};

inline AttentionRef attention_reference(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T,
                                 int H, int dh) {
  const int D = H * dh;
  AttentionRef r;
  r.probs.assign((size_t)B * H * T * T, 0);
  r.out.assign((size_t)B * T * D, 0);
  r.lse.assign((size_t)B * H * T, 0);
  r.dqkv.assign((size_t)B * T * 3 * D, 0);
  const double scale = 1.0 / std::sqrt((double)dh);
  auto at = [&](int b, int t, int which, int h, int d) {
    return (double)qkv[((size_t)b * T + t) * 3 * D + which * D + h * dh + d];
  };
  auto go = [&](int b, int t, int h, int d) { return (double)dout[((size_t)b * T + t) * D + h * dh + d]; };
  std::vector<double> p((size_t)T * T), ds((size_t)T * T), dp(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < T; ++i) {
        double mx = -1e300;
        for (int j = 0; j < T; ++j) {
          double s = 0;
          for (int d = 0; d < dh; ++d) s += at(b, i, 0, h, d) * at(b, j, 1, h, d);
          p[(size_t)i * T + j] = s * scale;
          mx = std::max(mx, s * scale);
        }
        double sum = 0;
        for (int j = 0; j < T; ++j) sum += (p[(size_t)i * T + j] = std::exp(p[(size_t)i * T + j] - mx));
        r.lse[((size_t)b * H + h) * T + i] = mx + std::log(sum);
        for (int j = 0; j < T; ++j) p[(size_t)i * T + j] /= sum;
        std::copy(p.begin() + (size_t)i * T, p.begin() + (size_t)(i + 1) * T,
                  r.probs.begin() + (((size_t)b * H + h) * T + i) * T);
        for (int d = 0; d < dh; ++d) {
          double o = 0;
          for (int j = 0; j < T; ++j) o += p[(size_t)i * T + j] * at(b, j, 2, h, d);
          r.out[((size_t)b * T + i) * D + h * dh + d] = o;
        }
        double delta = 0;
        for (int j = 0; j < T; ++j) {
          double s = 0;
          for (int d = 0; d < dh; ++d) s += go(b, i, h, d) * at(b, j, 2, h, d);
          dp[j] = s;
          delta += p[(size_t)i * T + j] * s;
        }
        for (int j = 0; j < T; ++j) ds[(size_t)i * T + j] = p[(size_t)i * T + j] * (dp[j] - delta);
      }
      for (int i = 0; i < T; ++i)
        for (int d = 0; d < dh; ++d) {
          double dq = 0, dk = 0, dv = 0;
          for (int j = 0; j < T; ++j) {
            dq += ds[(size_t)i * T + j] * at(b, j, 1, h, d);
            dk += ds[(size_t)j * T + i] * at(b, j, 0, h, d);
            dv += p[(size_t)j * T + i] * go(b, j, h, d);
          }
          double* row = &r.dqkv[((size_t)b * T + i) * 3 * D + h * dh + d];
          row[0] = dq * scale;
          row[D] = dk * scale;
          row[2 * D] = dv;
        }
    }
  return r;
}

}  // namespace vitddp_test
