// CPU reference ViT: torchvision's VisionTransformer (dropout 0) with a mean cross-entropy loss.
//
// Conventions used throughout this file:
//  - Activations are stored in double, in row-major [rows, features] matrices where a row is one
//    token of one image (row = b * seq + t), so every per-token operation is a plain row loop.
//  - Parameters arrive as T (float or double). forward() converts them once to double and stores
//    the linear-layer weights transposed ([in, out]), so that y = x W^T + b is computed as a sum
//    of rows of W^T scaled by x (an "axpy" loop that streams memory contiguously and vectorises
//    without reassociating sums). backward() reads the weights in their own [out, in] layout, which
//    is already the layout the axpy form of dX = dY W needs.
//  - Parameter gradients are accumulated in a double buffer with the flat layout of the
//    parameters; a group is copied to the caller's T buffer (written or added) right before it is
//    reported to on_ready.
#include "model/cpu_vit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace vitddp {
namespace {

// ---- dense building blocks (all single-threaded, double accumulation) ----

/// C[m, :] += sum_k A(m, k) * B[k, :] for m < rows, k < kdim, where A(m, k) = A[m * a_rs + k * a_cs]
/// (the strides let A be a transposed view) and B is row-major [kdim, n]. The multiply-add
/// kernel of every linear layer. Output rows are done four at a time so that each row of B,
/// streamed contiguously, serves four rows of C; every C entry is still summed in order of k.
template <typename BT>
void gemm_acc(int rows, int n, int kdim, const double* A, size_t a_rs, size_t a_cs, const BT* B,
              double* C) {
  int m = 0;
  for (; m + 4 <= rows; m += 4) {
    double* __restrict c0 = C + static_cast<size_t>(m) * n;
    double* __restrict c1 = c0 + n;
    double* __restrict c2 = c1 + n;
    double* __restrict c3 = c2 + n;
    const double* a = A + static_cast<size_t>(m) * a_rs;
    for (int k = 0; k < kdim; ++k) {
      const double* ak = a + static_cast<size_t>(k) * a_cs;
      const double a0 = ak[0], a1 = ak[a_rs], a2 = ak[2 * a_rs], a3 = ak[3 * a_rs];
      const BT* __restrict b = B + static_cast<size_t>(k) * n;
      for (int j = 0; j < n; ++j) {
        const double bj = static_cast<double>(b[j]);
        c0[j] += a0 * bj;
        c1[j] += a1 * bj;
        c2[j] += a2 * bj;
        c3[j] += a3 * bj;
      }
    }
  }
  for (; m < rows; ++m) {
    double* __restrict c = C + static_cast<size_t>(m) * n;
    for (int k = 0; k < kdim; ++k) {
      const double am = A[static_cast<size_t>(m) * a_rs + static_cast<size_t>(k) * a_cs];
      const BT* __restrict b = B + static_cast<size_t>(k) * n;
      for (int j = 0; j < n; ++j) c[j] += am * static_cast<double>(b[j]);
    }
  }
}

/// Y[r, :] (=|+=) b + X[r, :] W^T for r < rows, with W^T given as Wt [in, out] row-major.
/// `add` = true adds the result onto Y (used for the residual connections).
void linear_fwd(const double* X, int rows, int in, const double* Wt, const double* b, int out,
                double* Y, bool add) {
  for (int r = 0; r < rows; ++r) {
    double* y = Y + static_cast<size_t>(r) * out;
    for (int o = 0; o < out; ++o) y[o] = (add ? y[o] : 0.0) + b[o];
  }
  gemm_acc(rows, out, in, X, in, 1, Wt, Y);
}

/// Backward of Y = X W^T + b over `rows` rows, W [out, in] row-major:
///   dW += dY^T X,  db += sum_r dY[r, :],  dX = dY W (overwritten; skipped when dX is null).
template <typename W>
void linear_bwd(const double* X, const double* dY, int rows, int in, int out, const W* w,
                double* dW, double* db, double* dX) {
  for (int r = 0; r < rows; ++r) {
    const double* dy = dY + static_cast<size_t>(r) * out;
    for (int o = 0; o < out; ++o) db[o] += dy[o];
  }
  // dW[o, :] += sum_r dY[r, o] X[r, :]: A = dY viewed transposed (row stride 1, column stride out).
  gemm_acc(out, in, rows, dY, 1, static_cast<size_t>(out), X, dW);
  if (dX) {
    std::fill(dX, dX + static_cast<size_t>(rows) * in, 0.0);
    gemm_acc(rows, in, out, dY, static_cast<size_t>(out), 1, w, dX);
  }
}

/// LayerNorm over the last dimension (n features) of one row, torch semantics:
///   mu = mean(x), var = mean((x - mu)^2) (biased), rstd = 1 / sqrt(var + eps),
///   xhat = (x - mu) * rstd, y = xhat * w + b.
/// Keeps xhat and rstd for the backward.
void layernorm_row_fwd(const double* x, int n, const double* w, const double* b, double eps,
                       double* xhat, double* rstd, double* y) {
  double mu = 0.0;
  for (int i = 0; i < n; ++i) mu += x[i];
  mu /= n;
  double var = 0.0;
  for (int i = 0; i < n; ++i) var += (x[i] - mu) * (x[i] - mu);
  var /= n;
  const double rs = 1.0 / std::sqrt(var + eps);
  *rstd = rs;
  for (int i = 0; i < n; ++i) {
    xhat[i] = (x[i] - mu) * rs;
    y[i] = xhat[i] * w[i] + b[i];
  }
}

/// Backward of layernorm_row_fwd for one row. With dxhat = dy * w:
///   dw += dy * xhat,  db += dy,
///   dx += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
/// (The two means are the contributions of x through mu and through var.) dx is *added to*,
/// because every LayerNorm in the ViT sits on a residual branch.
template <typename W>
void layernorm_row_bwd(const double* dy, const double* xhat, double rstd, int n, const W* w,
                       double* dw, double* db, double* dx) {
  double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
  for (int i = 0; i < n; ++i) {
    const double dxh = dy[i] * static_cast<double>(w[i]);
    mean_dxhat += dxh;
    mean_dxhat_xhat += dxh * xhat[i];
    dw[i] += dy[i] * xhat[i];
    db[i] += dy[i];
  }
  mean_dxhat /= n;
  mean_dxhat_xhat /= n;
  for (int i = 0; i < n; ++i) {
    const double dxh = dy[i] * static_cast<double>(w[i]);
    dx[i] += rstd * (dxh - mean_dxhat - xhat[i] * mean_dxhat_xhat);
  }
}

constexpr double kInvSqrt2 = 0.7071067811865476;    // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1 / sqrt(2 pi)

/// GELU (exact, erf form, torch.nn.GELU() default): 0.5 u (1 + erf(u / sqrt(2))).
inline double gelu(double u) { return 0.5 * u * (1.0 + std::erf(u * kInvSqrt2)); }

/// d gelu / du = Phi(u) + u phi(u), Phi/phi the standard normal CDF/density.
inline double gelu_grad(double u) {
  return 0.5 * (1.0 + std::erf(u * kInvSqrt2)) + u * kInvSqrt2Pi * std::exp(-0.5 * u * u);
}

inline double dot(const double* a, const double* b, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

/// Copies a [rows, cols] matrix of T into its double transpose [cols, rows].
template <typename S>
void transpose_to_double(const S* src, int rows, int cols, double* dst) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      dst[static_cast<size_t>(c) * rows + r] = static_cast<double>(src[static_cast<size_t>(r) * cols + c]);
}

}  // namespace

template <typename T>
struct CpuViT<T>::Impl {
  ParamLayout L;
  int max_batch = 0;
  int batch = 0;              // batch of the last successful forward; 0 = none yet
  // Dimensions.
  int D, H, dh, M, K, S, NP, PD, P, G, C, IS;  // S = seq_len (tokens per image)

  // Parameters as double (flat layout), and transposed linear weights ([in, out]).
  std::vector<double> pd;
  ViTTensors<double> p;  // bound to pd
  std::vector<double> conv_wt, head_wt;
  struct BlockWt {
    std::vector<double> qkv, proj, fc1, fc2;
  };
  std::vector<BlockWt> wt;

  // Saved activations of the last forward (sized for max_batch).
  std::vector<double> patches;  // [B*NP, PD] im2col of the images
  std::vector<double> h;        // [B*S, D] residual stream (working buffer)
  struct BlockAct {
    std::vector<double> xhat1, rstd1, y1;  // ln_1: normalised input, 1/std, output  [B*S, D], [B*S]
    std::vector<double> qkv;               // [B*S, 3D]
    std::vector<double> attn;              // softmax probabilities [B, H, S, S]
    std::vector<double> o;                 // concatenated head outputs [B*S, D]
    std::vector<double> xhat2, rstd2, z;   // ln_2
    std::vector<double> u, g;              // mlp.0 output and its GELU [B*S, M]
  };
  std::vector<BlockAct> act;
  std::vector<double> xhat_f, rstd_f, x0;  // final LN of token 0: [B, D], [B], [B, D]
  std::vector<double> logits, probs;       // [B, K]
  std::vector<int32_t> labels;             // [B]

  // Backward buffers.
  std::vector<double> gacc;  // gradient accumulator, flat layout (layout.total)
  ViTTensors<double> g;      // bound to gacc
  std::vector<double> dh_, dtmp, dmlp, dout, dqkv, dlogits, dx0;
  std::vector<double> dA_row;  // [S], one row of dLoss/dA in attention_bwd

  Impl(const ParamLayout& layout, int mb) : L(layout), max_batch(mb) {
    const ViTConfig& c = L.cfg;
    if (mb < 1) throw std::invalid_argument("CpuViT: max_batch must be >= 1, got " + std::to_string(mb));
    if (c.patch_size < 1 || c.image_size % c.patch_size != 0)
      throw std::invalid_argument("CpuViT: image_size " + std::to_string(c.image_size) +
                                  " is not a multiple of patch_size " + std::to_string(c.patch_size));
    if (c.heads < 1 || c.hidden % c.heads != 0)
      throw std::invalid_argument("CpuViT: hidden " + std::to_string(c.hidden) +
                                  " is not a multiple of heads " + std::to_string(c.heads));
    if (L.named.blocks.size() != static_cast<size_t>(c.layers))
      throw std::invalid_argument("CpuViT: parameter table does not match config " + c.name +
                                  " (build it with make_param_layout)");
    D = c.hidden; H = c.heads; dh = c.head_dim(); M = c.mlp_dim; K = c.num_classes;
    S = c.seq_len(); NP = c.num_patches(); PD = c.patch_dim(); P = c.patch_size; G = c.grid();
    C = c.channels; IS = c.image_size;

    const size_t B = static_cast<size_t>(mb), R = B * S;
    pd.assign(L.total, 0.0);
    p = bind_tensors<double>(L, pd.data());
    conv_wt.assign(static_cast<size_t>(PD) * D, 0.0);
    head_wt.assign(static_cast<size_t>(D) * K, 0.0);
    wt.resize(c.layers);
    for (auto& w : wt) {
      w.qkv.assign(static_cast<size_t>(D) * 3 * D, 0.0);
      w.proj.assign(static_cast<size_t>(D) * D, 0.0);
      w.fc1.assign(static_cast<size_t>(D) * M, 0.0);
      w.fc2.assign(static_cast<size_t>(M) * D, 0.0);
    }
    patches.assign(B * NP * PD, 0.0);
    h.assign(R * D, 0.0);
    act.resize(c.layers);
    for (auto& a : act) {
      a.xhat1.assign(R * D, 0.0); a.rstd1.assign(R, 0.0); a.y1.assign(R * D, 0.0);
      a.qkv.assign(R * 3 * D, 0.0);
      a.attn.assign(B * H * S * S, 0.0);
      a.o.assign(R * D, 0.0);
      a.xhat2.assign(R * D, 0.0); a.rstd2.assign(R, 0.0); a.z.assign(R * D, 0.0);
      a.u.assign(R * M, 0.0); a.g.assign(R * M, 0.0);
    }
    xhat_f.assign(B * D, 0.0); rstd_f.assign(B, 0.0); x0.assign(B * D, 0.0);
    logits.reserve(B * K);
    probs.assign(B * K, 0.0);
    labels.assign(B, 0);

    gacc.assign(L.total, 0.0);
    g = bind_tensors<double>(L, gacc.data());
    dh_.assign(R * D, 0.0); dtmp.assign(R * D, 0.0); dmlp.assign(R * M, 0.0);
    dout.assign(R * D, 0.0); dqkv.assign(R * 3 * D, 0.0);
    dlogits.assign(B * K, 0.0); dx0.assign(B * D, 0.0);
    dA_row.assign(S, 0.0);
  }

  /// Converts the parameters to double and transposes the linear weights for the forward.
  void load_params(const T* params) {
    for (size_t i = 0; i < L.total; ++i) pd[i] = static_cast<double>(params[i]);
    transpose_to_double(p.conv_w, D, PD, conv_wt.data());
    transpose_to_double(p.head_w, K, D, head_wt.data());
    for (size_t l = 0; l < wt.size(); ++l) {
      const BlockTensors<double>& bp = p.blocks[l];
      transpose_to_double(bp.qkv_w, 3 * D, D, wt[l].qkv.data());
      transpose_to_double(bp.proj_w, D, D, wt[l].proj.data());
      transpose_to_double(bp.fc1_w, M, D, wt[l].fc1.data());
      transpose_to_double(bp.fc2_w, D, M, wt[l].fc2.data());
    }
  }

  /// Multi-head self-attention core for all images and heads: for head hd, q/k/v are columns
  /// hd*dh .. hd*dh+dh-1 of the Q (0..D-1), K (D..2D-1) and V (2D..3D-1) parts of qkv;
  /// A = softmax_j(q_i . k_j / sqrt(dh)), o_i = sum_j A_ij v_j, written into o's columns of hd.
  void attention_fwd(BlockAct& a, int B) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    const size_t ld = 3 * static_cast<size_t>(D);
    for (int b = 0; b < B; ++b) {
      const double* qkv = a.qkv.data() + static_cast<size_t>(b) * S * ld;
      for (int hd = 0; hd < H; ++hd) {
        const size_t cq = static_cast<size_t>(hd) * dh, ck = D + cq, cv = 2 * D + cq;
        for (int i = 0; i < S; ++i) {
          double* arow = a.attn.data() + ((static_cast<size_t>(b) * H + hd) * S + i) * S;
          const double* q = qkv + i * ld + cq;
          double mx = -std::numeric_limits<double>::infinity();
          for (int j = 0; j < S; ++j) {
            arow[j] = scale * dot(q, qkv + j * ld + ck, dh);
            mx = std::max(mx, arow[j]);
          }
          double sum = 0.0;
          for (int j = 0; j < S; ++j) {
            arow[j] = std::exp(arow[j] - mx);
            sum += arow[j];
          }
          const double inv = 1.0 / sum;
          for (int j = 0; j < S; ++j) arow[j] *= inv;
          double* orow = a.o.data() + (static_cast<size_t>(b) * S + i) * D + cq;
          std::fill(orow, orow + dh, 0.0);
          for (int j = 0; j < S; ++j) {
            const double aij = arow[j];
            const double* v = qkv + j * ld + cv;
            for (int e = 0; e < dh; ++e) orow[e] += aij * v[e];
          }
        }
      }
    }
  }

  /// Backward of attention_fwd: given dO (dout, [B*S, D]) writes dqkv ([B*S, 3D]).
  ///   dA_ij = dO_i . v_j,  dv_j = sum_i A_ij dO_i,
  ///   softmax backward: dS_ij = A_ij (dA_ij - sum_j' A_ij' dA_ij'),
  ///   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i.
  void attention_bwd(const BlockAct& a, int B) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    const size_t ld = 3 * static_cast<size_t>(D);
    std::fill(dqkv.begin(), dqkv.begin() + static_cast<size_t>(B) * S * ld, 0.0);
    double* dA = dA_row.data();
    for (int b = 0; b < B; ++b) {
      const double* qkv = a.qkv.data() + static_cast<size_t>(b) * S * ld;
      double* dq_all = dqkv.data() + static_cast<size_t>(b) * S * ld;
      for (int hd = 0; hd < H; ++hd) {
        const size_t cq = static_cast<size_t>(hd) * dh, ck = D + cq, cv = 2 * D + cq;
        for (int i = 0; i < S; ++i) {
          const double* arow = a.attn.data() + ((static_cast<size_t>(b) * H + hd) * S + i) * S;
          const double* dorow = dout.data() + (static_cast<size_t>(b) * S + i) * D + cq;
          double rowdot = 0.0;  // sum_j A_ij dA_ij
          for (int j = 0; j < S; ++j) {
            dA[j] = dot(dorow, qkv + j * ld + cv, dh);
            rowdot += arow[j] * dA[j];
            double* dv = dq_all + j * ld + cv;
            for (int e = 0; e < dh; ++e) dv[e] += arow[j] * dorow[e];
          }
          const double* q = qkv + i * ld + cq;
          double* dq = dq_all + i * ld + cq;
          for (int j = 0; j < S; ++j) {
            const double ds = scale * arow[j] * (dA[j] - rowdot);
            const double* k = qkv + j * ld + ck;
            double* dk = dq_all + j * ld + ck;
            for (int e = 0; e < dh; ++e) {
              dq[e] += ds * k[e];
              dk[e] += ds * q[e];
            }
          }
        }
      }
    }
  }
  double forward(const T* params, const float* images, const int32_t* lab, int B) {
    if (B < 1 || B > max_batch)
      throw std::invalid_argument("CpuViT::forward: batch " + std::to_string(B) +
                                  " outside [1, " + std::to_string(max_batch) + "]");
    for (int b = 0; b < B; ++b)
      if (lab[b] < 0 || lab[b] >= K)
        throw std::invalid_argument("CpuViT::forward: label " + std::to_string(lab[b]) + " of image " +
                                    std::to_string(b) + " outside [0, " + std::to_string(K) + ")");
    batch = 0;  // invalid until this forward completes
    load_params(params);
    std::copy(lab, lab + B, labels.begin());
    const int R = B * S;
    const double eps = L.cfg.ln_eps;

    // Patch embedding: im2col (row = b*NP + i*G + j, column = (c*P + kh)*P + kw), then a linear
    // layer with the conv weight [D, C*P*P] — exactly the kernel=stride=P convolution.
    for (int b = 0; b < B; ++b)
      for (int pi = 0; pi < G; ++pi)
        for (int pj = 0; pj < G; ++pj) {
          double* row = patches.data() + (static_cast<size_t>(b) * NP + pi * G + pj) * PD;
          for (int c = 0; c < C; ++c)
            for (int kh = 0; kh < P; ++kh) {
              const float* src = images + ((static_cast<size_t>(b) * C + c) * IS + pi * P + kh) * IS + pj * P;
              for (int kw = 0; kw < P; ++kw) row[(c * P + kh) * P + kw] = src[kw];
            }
        }
    for (int b = 0; b < B; ++b) {
      double* hb = h.data() + static_cast<size_t>(b) * S * D;
      std::copy(p.class_token, p.class_token + D, hb);  // token 0: class token
      linear_fwd(patches.data() + static_cast<size_t>(b) * NP * PD, NP, PD, conv_wt.data(), p.conv_b, D,
                 hb + D, false);  // tokens 1..NP: patches
      for (int i = 0; i < S * D; ++i) hb[i] += p.pos_embedding[i];
    }

    // Encoder blocks (pre-LN).
    for (size_t l = 0; l < act.size(); ++l) {
      BlockAct& a = act[l];
      const BlockTensors<double>& bp = p.blocks[l];
      for (int r = 0; r < R; ++r)
        layernorm_row_fwd(h.data() + static_cast<size_t>(r) * D, D, bp.ln1_w, bp.ln1_b, eps,
                          a.xhat1.data() + static_cast<size_t>(r) * D, &a.rstd1[r],
                          a.y1.data() + static_cast<size_t>(r) * D);
      linear_fwd(a.y1.data(), R, D, wt[l].qkv.data(), bp.qkv_b, 3 * D, a.qkv.data(), false);
      attention_fwd(a, B);
      linear_fwd(a.o.data(), R, D, wt[l].proj.data(), bp.proj_b, D, h.data(), true);  // h += attn
      for (int r = 0; r < R; ++r)
        layernorm_row_fwd(h.data() + static_cast<size_t>(r) * D, D, bp.ln2_w, bp.ln2_b, eps,
                          a.xhat2.data() + static_cast<size_t>(r) * D, &a.rstd2[r],
                          a.z.data() + static_cast<size_t>(r) * D);
      linear_fwd(a.z.data(), R, D, wt[l].fc1.data(), bp.fc1_b, M, a.u.data(), false);
      for (size_t i = 0; i < static_cast<size_t>(R) * M; ++i) a.g[i] = gelu(a.u[i]);
      linear_fwd(a.g.data(), R, M, wt[l].fc2.data(), bp.fc2_b, D, h.data(), true);  // h += mlp
    }

    // Final LayerNorm; only token 0 feeds the head, so only it is normalised.
    for (int b = 0; b < B; ++b)
      layernorm_row_fwd(h.data() + static_cast<size_t>(b) * S * D, D, p.ln_w, p.ln_b, eps,
                        xhat_f.data() + static_cast<size_t>(b) * D, &rstd_f[b],
                        x0.data() + static_cast<size_t>(b) * D);
    logits.resize(static_cast<size_t>(B) * K);
    linear_fwd(x0.data(), B, D, head_wt.data(), p.head_b, K, logits.data(), false);

    // Mean cross-entropy: loss_b = logsumexp(z_b) - z_b[label_b]; probs kept for the backward.
    double loss = 0.0;
    for (int b = 0; b < B; ++b) {
      const double* z = logits.data() + static_cast<size_t>(b) * K;
      double* pr = probs.data() + static_cast<size_t>(b) * K;
      const double mx = *std::max_element(z, z + K);
      double sum = 0.0;
      for (int k = 0; k < K; ++k) {
        pr[k] = std::exp(z[k] - mx);
        sum += pr[k];
      }
      for (int k = 0; k < K; ++k) pr[k] /= sum;
      loss += mx + std::log(sum) - z[labels[b]];
    }
    batch = B;
    return loss / B;
  }

  void backward(const T* params, T* grads, bool accumulate, const GradReadyFn& on_ready) {
    if (batch == 0) throw std::logic_error("CpuViT::backward called without a successful forward");
    const int B = batch, R = B * S;
    const ViTTensors<const T> w = bind_tensors<const T>(L, params);
    const ModelParams& N = L.named;  // registration indices for on_ready
    std::fill(gacc.begin(), gacc.end(), 0.0);

    // Copies the finished gradients of `group` to `grads` and reports them.
    auto finish = [&](std::vector<size_t> group) {
      for (size_t idx : group) {
        const ParamInfo& pi = L.params[idx];
        const double* src = gacc.data() + pi.offset;
        T* dst = grads + pi.offset;
        if (accumulate)
          for (size_t i = 0; i < pi.numel; ++i) dst[i] = static_cast<T>(static_cast<double>(dst[i]) + src[i]);
        else
          for (size_t i = 0; i < pi.numel; ++i) dst[i] = static_cast<T>(src[i]);
      }
      if (on_ready) on_ready(group);
    };

    // Cross-entropy (mean over the batch): dz_bk = (softmax(z_b)_k - [k == label_b]) / B.
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < K; ++k)
        dlogits[static_cast<size_t>(b) * K + k] =
            (probs[static_cast<size_t>(b) * K + k] - (k == labels[b] ? 1.0 : 0.0)) / B;
    linear_bwd(x0.data(), dlogits.data(), B, D, K, w.head_w, g.head_w, g.head_b, dx0.data());
    finish({N.head_b.index, N.head_w.index});

    // Final LayerNorm of token 0; the gradient of the residual stream starts here.
    std::fill(dh_.begin(), dh_.begin() + static_cast<size_t>(R) * D, 0.0);
    for (int b = 0; b < B; ++b)
      layernorm_row_bwd(dx0.data() + static_cast<size_t>(b) * D, xhat_f.data() + static_cast<size_t>(b) * D,
                        rstd_f[b], D, w.ln_w, g.ln_w, g.ln_b, dh_.data() + static_cast<size_t>(b) * S * D);
    finish({N.ln_b.index, N.ln_w.index});

    // Encoder blocks, last first. dh_ holds dLoss/d(block output) on entry and
    // dLoss/d(block input) on exit (the residual paths pass it through unchanged).
    for (size_t l = act.size(); l-- > 0;) {
      const BlockAct& a = act[l];
      const BlockTensors<const T>& bw = w.blocks[l];
      BlockTensors<double>& bg = g.blocks[l];
      const BlockParams& ix = N.blocks[l];
      // mlp.3: out = g W3^T + b3.
      linear_bwd(a.g.data(), dh_.data(), R, M, D, bw.fc2_w, bg.fc2_w, bg.fc2_b, dmlp.data());
      finish({ix.fc2_b.index, ix.fc2_w.index});
      // GELU, then mlp.0: u = z W0^T + b0.
      for (size_t i = 0; i < static_cast<size_t>(R) * M; ++i) dmlp[i] *= gelu_grad(a.u[i]);
      linear_bwd(a.z.data(), dmlp.data(), R, D, M, bw.fc1_w, bg.fc1_w, bg.fc1_b, dtmp.data());
      finish({ix.fc1_b.index, ix.fc1_w.index});
      // ln_2 (adds into the residual gradient).
      for (int r = 0; r < R; ++r)
        layernorm_row_bwd(dtmp.data() + static_cast<size_t>(r) * D, a.xhat2.data() + static_cast<size_t>(r) * D,
                          a.rstd2[r], D, bw.ln2_w, bg.ln2_w, bg.ln2_b, dh_.data() + static_cast<size_t>(r) * D);
      finish({ix.ln2_b.index, ix.ln2_w.index});
      // out_proj.
      linear_bwd(a.o.data(), dh_.data(), R, D, D, bw.proj_w, bg.proj_w, bg.proj_b, dout.data());
      finish({ix.proj_b.index, ix.proj_w.index});
      // Attention core, then in_proj.
      attention_bwd(a, B);
      linear_bwd(a.y1.data(), dqkv.data(), R, D, 3 * D, bw.qkv_w, bg.qkv_w, bg.qkv_b, dtmp.data());
      finish({ix.qkv_b.index, ix.qkv_w.index});
      // ln_1.
      for (int r = 0; r < R; ++r)
        layernorm_row_bwd(dtmp.data() + static_cast<size_t>(r) * D, a.xhat1.data() + static_cast<size_t>(r) * D,
                          a.rstd1[r], D, bw.ln1_w, bg.ln1_w, bg.ln1_b, dh_.data() + static_cast<size_t>(r) * D);
      finish({ix.ln1_b.index, ix.ln1_w.index});
    }

    // Embeddings: h0[b, t] = pos[t] + (t == 0 ? class_token : emb[b, t-1]).
    for (int b = 0; b < B; ++b) {
      const double* db = dh_.data() + static_cast<size_t>(b) * S * D;
      for (int i = 0; i < S * D; ++i) g.pos_embedding[i] += db[i];
      for (int d = 0; d < D; ++d) g.class_token[d] += db[d];
    }
    finish({N.pos.index, N.cls.index});
    for (int b = 0; b < B; ++b)
      linear_bwd(patches.data() + static_cast<size_t>(b) * NP * PD, dh_.data() + (static_cast<size_t>(b) * S + 1) * D,
                 NP, PD, D, w.conv_w, g.conv_w, g.conv_b, static_cast<double*>(nullptr));
    finish({N.conv_b.index, N.conv_w.index});
  }
};

template <typename T>
CpuViT<T>::CpuViT(const ParamLayout& layout, int max_batch) : impl_(new Impl(layout, max_batch)) {}

template <typename T>
CpuViT<T>::~CpuViT() {
  delete impl_;
}

template <typename T>
double CpuViT<T>::forward(const T* params, const float* images, const int32_t* labels, int batch) {
  return impl_->forward(params, images, labels, batch);
}

template <typename T>
void CpuViT<T>::backward(const T* params, T* grads, bool accumulate, const GradReadyFn& on_ready) {
  impl_->backward(params, grads, accumulate, on_ready);
}

template <typename T>
const std::vector<double>& CpuViT<T>::logits() const {
  return impl_->logits;
}

template <typename T>
size_t CpuViT<T>::allocated_bytes() const {
  const Impl& m = *impl_;
  auto bytes = [](const auto& v) { return v.capacity() * sizeof(v[0]); };
  size_t n = bytes(m.pd) + bytes(m.conv_wt) + bytes(m.head_wt) + bytes(m.patches) + bytes(m.h);
  for (const auto& w : m.wt) n += bytes(w.qkv) + bytes(w.proj) + bytes(w.fc1) + bytes(w.fc2);
  for (const auto& a : m.act)
    n += bytes(a.xhat1) + bytes(a.rstd1) + bytes(a.y1) + bytes(a.qkv) + bytes(a.attn) + bytes(a.o) + bytes(a.xhat2) +
         bytes(a.rstd2) + bytes(a.z) + bytes(a.u) + bytes(a.g);
  n += bytes(m.xhat_f) + bytes(m.rstd_f) + bytes(m.x0) + bytes(m.logits) + bytes(m.probs) + bytes(m.labels);
  n += bytes(m.gacc) + bytes(m.dh_) + bytes(m.dtmp) + bytes(m.dmlp) + bytes(m.dout) + bytes(m.dqkv) + bytes(m.dlogits) +
       bytes(m.dx0) + bytes(m.dA_row);
  return n;
}

template class CpuViT<float>;
template class CpuViT<double>;

}  // namespace vitddp
