// Attention of cuda/kernels/attention.h (attention_forward, attention_backward; on tensor cores,
// cuda/kernels/attention_mma.h) in fp32, tf32 and bf16, against attention_reference of
// tests/gpu/attention_reference.h in double (on the same bf16-rounded inputs for bf16). CPU twin:
// CpuViT's attention_fwd and attention_bwd in model/cpu_vit.cpp.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/kernels/attention.h"
#include "cuda/kernels/attention_gemm.h"
#include "tests/catch.h"
#include "tests/gpu/attention_reference.h"
#include "tests/gpu/bf16_test_util.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;
using bf16 = __nv_bfloat16;

namespace {

/// Norm-relative error of what the forward saved (attention_saved_floats floats at the front of
/// `saved`) against the reference: the probabilities, or on the tensor-core kernels
/// (`stats`) each row's log-sum-exp, max + log(sum) = max - log(1 / sum), against ref.lse. The
/// floats after the saved ones (guard) must still hold their NaN fill: REQUIREd.
double saved_error(const std::vector<float>& saved, size_t floats, const AttentionRef& ref, bool stats) {
  for (size_t i = floats; i < saved.size(); ++i) REQUIRE(std::isnan(saved[i]));
  if (!stats) return norm_rel_err(saved.data(), ref.probs.data(), ref.probs.size());
  REQUIRE(floats == 2 * ref.lse.size());
  std::vector<double> lse(ref.lse.size());
  for (size_t i = 0; i < lse.size(); ++i) lse[i] = (double)saved[2 * i] - std::log((double)saved[2 * i + 1]);
  return norm_rel_err(lse, ref.lse);
}
constexpr size_t kGuard = 64;  // NaN floats after the saved softmax

/// Norm-relative errors of the fp32 attention kernels (`precision` fp32, or tf32: on TF32 tensor
/// cores where the shape allows) against attention_reference in double, on normal inputs (stream
/// `s`); `saved` as saved_error.
struct AttentionErrors {
  double saved, out, dqkv;
};
AttentionErrors attention_errors(cudaStream_t s, int B, int H, int T, int dh, Precision precision) {
  const int D = H * dh;
  const auto hqkv = normal_vec((size_t)B * T * 3 * D, 4, 0), hdo = normal_vec((size_t)B * T * D, 4, 1);
  const AttentionRef ref = attention_reference(hqkv, hdo, B, T, H, dh);
  const size_t floats = attention_saved_floats(B, T, H, dh, precision);
  DevVec<float> qkv(hqkv), saved(std::vector<float>(floats + kGuard, NAN)), out(ref.out.size()), dout(hdo),
      dqkv(ref.dqkv.size()), scratch(attention_backward_scratch_floats(B, T, H, dh));
  attention_forward(qkv.get(), saved.get(), out.get(), B, T, H, dh, s, precision);
  attention_backward(qkv.get(), saved.get(), dout.get(), dqkv.get(), scratch.get(), B, T, H, dh, s, precision);
  return {saved_error(saved.download(), floats, ref, attention_saves_stats(T, dh, precision)),
          norm_rel_err(out.download(), ref.out), norm_rel_err(dqkv.download(), ref.dqkv)};
}

}  // namespace

TEST_CASE("attention: forward and backward match host loops", "[gpu][attention]") {
  REQUIRE_GPU();
  Stream st;
  struct Shape { int B, H, T, dh; };
  for (const Shape sh : {Shape{2, 3, 50, 64}, Shape{1, 2, 7, 16}, Shape{2, 1, 70, 80}, Shape{1, 2, 197, 64}}) {
    INFO("B=" << sh.B << " H=" << sh.H << " T=" << sh.T << " dh=" << sh.dh);
    const AttentionErrors e = attention_errors(st.s, sh.B, sh.H, sh.T, sh.dh, Precision::fp32);
    CHECK(e.saved < 1e-5);
    CHECK(e.out < 1e-5);
    CHECK(e.dqkv < 1e-5);
  }
  DevVec<float> dummy(16);
  CHECK_THROWS_AS(attention_forward(dummy.get(), dummy.get(), dummy.get(), 1, 513, 1, 64, st.s, Precision::tf32),
                  std::invalid_argument);
  CHECK_THROWS_AS(attention_forward(dummy.get(), dummy.get(), dummy.get(), 1, 50, 1, 64, st.s, Precision::bf16),
                  std::invalid_argument);  // fp32 buffers: fp32 or tf32 only
  CHECK_THROWS_AS(attention_forward(dummy.get(), dummy.get(), dummy.get(), 1, 513, 1, 64, st.s),
                  std::invalid_argument);
  CHECK_THROWS_AS(attention_forward(dummy.get(), dummy.get(), dummy.get(), 1, 50, 1, 129, st.s),
                  std::invalid_argument);
  CHECK_THROWS_AS(attention_forward(dummy.get(), dummy.get(), dummy.get(), 65536, 50, 1, 64, st.s),
                  std::invalid_argument);  // grid limit: refused before any launch
  // Within both bounds, but the larger kernels' shared memory (532 KiB at T 512, head_dim 128)
  // exceeds any GPU's per-block limit (227 KiB on an H200): refused by name, in both directions.
  std::string msg;
  try {
    attention_forward(dummy.get(), dummy.get(), dummy.get(), 1, 512, 1, 128, st.s);
  } catch (const std::invalid_argument& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("T=512") != std::string::npos);
  CHECK(msg.find("shared memory") != std::string::npos);
  CHECK_THROWS_AS(attention_backward(dummy.get(), dummy.get(), dummy.get(), dummy.get(), dummy.get(), 1, 512, 1, 128,
                                     st.s),
                  std::invalid_argument);
  // The tensor-core shapes save row statistics, so they have no fallback for misaligned buffers:
  // refused, in both directions (activations 16 bytes, statistics 8).
  DevVec<float> big(4 * 50 * 64 + 8);
  float* b = big.get();
  msg.clear();
  try {
    attention_forward(b + 1, b, b, 1, 50, 1, 64, st.s, Precision::tf32);
  } catch (const std::invalid_argument& e) {
    msg = e.what();
  }
  CHECK(msg.find("16-byte aligned activations") != std::string::npos);
  CHECK_THROWS_AS(attention_forward(b, b + 1, b, 1, 50, 1, 64, st.s, Precision::tf32), std::invalid_argument);
  CHECK_THROWS_AS(attention_backward(b, b, b, b + 2, b, 1, 50, 1, 64, st.s, Precision::tf32), std::invalid_argument);
  CUDA_CHECK(cudaStreamSynchronize(st.s));  // no launch error is left behind
}

TEST_CASE("attention: tf32 tensor cores (--precision tf32) match host loops within tf32 rounding",
          "[gpu][attention][tf32]") {
  REQUIRE_GPU();
  Stream st;
  struct Shape { int B, H, T, dh; };
  // head_dim 64 with T <= 64 runs the tensor-core kernels (cuda/kernels/attention_mma.h): the inputs are
  // rounded to tf32 (10-bit mantissa, relative 2^-11), so the error is visible but small. The
  // other shapes keep fp32 arithmetic even with tf32 on.
  for (const Shape sh : {Shape{2, 3, 50, 64}, Shape{1, 2, 64, 64}, Shape{3, 2, 1, 64}, Shape{2, 2, 17, 64},
                         Shape{1, 2, 7, 16}, Shape{2, 1, 70, 80}}) {
    const bool tensor_cores = sh.T <= 64 && sh.dh == 64;
    INFO("B=" << sh.B << " H=" << sh.H << " T=" << sh.T << " dh=" << sh.dh);
    const AttentionErrors e = attention_errors(st.s, sh.B, sh.H, sh.T, sh.dh, Precision::tf32);
    std::printf("attention tf32 B=%d H=%d T=%d dh=%d: norm-relative errors %s %.2e out %.2e dqkv %.2e\n", sh.B,
                sh.H, sh.T, sh.dh, tensor_cores ? "row log-sum-exp" : "probs", e.saved, e.out, e.dqkv);
    CHECK(attention_saves_stats(sh.T, sh.dh, Precision::tf32) == tensor_cores);
    const double tol = tensor_cores ? 3e-3 : 1e-5;
    CHECK(e.saved < tol);
    CHECK(e.out < tol);
    CHECK(e.dqkv < tol);
    if (tensor_cores) CHECK(e.out > 1e-6);  // tf32 rounding is there: the tensor-core path ran (T = 1: probs are 1)
  }
}

TEST_CASE("attention: bf16 activations match host loops", "[gpu][attention][bf16]") {
  REQUIRE_GPU();
  Stream st;
  struct Shape { int B, H, T, dh; };
  // head_dim 64 with T <= 64 runs the tensor-core kernels (cuda/kernels/attention_mma.h): full, partial and
  // single-row tiles; head_dim 32 and T = 70 run the fp32 small-shape and general kernels.
  for (const Shape sh : {Shape{2, 3, 50, 64}, Shape{1, 2, 64, 64}, Shape{3, 2, 1, 64}, Shape{2, 2, 17, 64},
                         Shape{1, 1, 33, 64}, Shape{2, 2, 50, 32}, Shape{2, 1, 70, 80}}) {
    const int B = sh.B, H = sh.H, T = sh.T, dh = sh.dh, D = H * dh;
    INFO("B=" << B << " H=" << H << " T=" << T << " dh=" << dh);
    const auto hqkv = rounded(normal_vec((size_t)B * T * 3 * D, 25, 0)),
               hdo = rounded(normal_vec((size_t)B * T * D, 25, 1));
    const AttentionRef ref = attention_reference(hqkv, hdo, B, T, H, dh);
    const std::vector<double>&O = ref.out, &dQKV = ref.dqkv;
    DevVec<bf16> qkv(to_bf16(hqkv)), out(O.size()), dout(to_bf16(hdo)), dqkv(dQKV.size());
    const bool stats = attention_saves_stats(T, dh, Precision::bf16);
    CHECK(stats == (T <= 64 && dh == 64));
    const size_t floats = attention_saved_floats(B, T, H, dh, Precision::bf16);
    DevVec<float> saved(std::vector<float>(floats + kGuard, NAN)), scratch(attention_backward_scratch_floats(B, T, H, dh));
    attention_forward(qkv.get(), saved.get(), out.get(), B, T, H, dh, st.s);
    CHECK(saved_error(saved.download(), floats, ref, stats) < 1e-5);  // fp32 softmax of exact bf16 inputs
    CHECK(norm_rel_err(to_float(out.download()), O) < 4e-3);
    attention_backward(qkv.get(), saved.get(), dout.get(), dqkv.get(), scratch.get(), B, T, H, dh, st.s);
    CHECK(norm_rel_err(to_float(dqkv.download()), dQKV) < 4e-3);
  }
}

namespace {

/// Checks the tensor-core backward's dqkv_colsum [B, 3D] against the column sums, in double on the
/// host, of each batch item's T rows of the dqkv it stored, and that dqkv is the same bit for bit
/// as without the sums; `E` float (tf32) or bf16, `dqkv_plain` the backward's dqkv without them.
template <typename E, typename Run>
void check_colsum(const std::vector<E>& dqkv_plain, int B, int T, int D3, const Run& run) {
  DevVec<E> dqkv(dqkv_plain.size());
  DevVec<float> colsum(std::vector<float>((size_t)B * D3 + kGuard, NAN));
  run(dqkv.get(), colsum.get());
  const std::vector<E> stored = dqkv.download();
  REQUIRE(stored.size() == dqkv_plain.size());
  CHECK(std::memcmp(stored.data(), dqkv_plain.data(), stored.size() * sizeof(E)) == 0);
  const std::vector<float> got = colsum.download();
  for (size_t i = (size_t)B * D3; i < got.size(); ++i) REQUIRE(std::isnan(got[i]));  // nothing past [B, 3D]
  std::vector<double> want((size_t)B * D3, 0.0), have(want.size());
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < T; ++r)
      for (int c = 0; c < D3; ++c) {
        const E v = stored[((size_t)b * T + r) * D3 + c];
        if constexpr (std::is_same_v<E, float>)
          want[(size_t)b * D3 + c] += v;
        else
          want[(size_t)b * D3 + c] += __bfloat162float(v);
      }
  for (size_t i = 0; i < want.size(); ++i) have[i] = got[i];
  const double err = norm_rel_err(have, want);
  std::printf("attention dqkv_colsum B=%d T=%d 3D=%d: norm-relative error %.2e against double sums\n", B, T, D3, err);
  CHECK(err < 1e-6);  // fp32 sums of at most 64 terms
}

}  // namespace

TEST_CASE(
    "attention: the tensor-core backward's per-batch-item column sums of dqkv (in_proj's bias gradient) "
    "match double sums of the dqkv it stores, bf16 and tf32",
    "[gpu][attention][colsum]") {
  REQUIRE_GPU();
  Stream st;
  struct Shape {
    int B, H, T;
  };
  for (const Shape sh : {Shape{2, 3, 50}, Shape{1, 2, 64}, Shape{3, 2, 1}, Shape{2, 2, 17}}) {
    const int B = sh.B, H = sh.H, T = sh.T, dh = 64, D = H * dh;
    INFO("B=" << B << " H=" << H << " T=" << T);
    const auto hqkv = rounded(normal_vec((size_t)B * T * 3 * D, 27, 0)),
               hdo = rounded(normal_vec((size_t)B * T * D, 27, 1));
    DevVec<float> saved(attention_saved_floats(B, T, H, dh, Precision::bf16));
    {  // bf16
      DevVec<bf16> qkv(to_bf16(hqkv)), out((size_t)B * T * D), dout(to_bf16(hdo)), dqkv((size_t)B * T * 3 * D);
      attention_forward(qkv.get(), saved.get(), out.get(), B, T, H, dh, st.s);
      attention_backward(qkv.get(), saved.get(), dout.get(), dqkv.get(), nullptr, B, T, H, dh, st.s);
      check_colsum(dqkv.download(), B, T, 3 * D, [&](bf16* d, float* cs) {
        attention_backward(qkv.get(), saved.get(), dout.get(), d, nullptr, B, T, H, dh, st.s, cs);
      });
    }
    {  // tf32
      DevVec<float> qkv(hqkv), out((size_t)B * T * D), dout(hdo), dqkv((size_t)B * T * 3 * D);
      attention_forward(qkv.get(), saved.get(), out.get(), B, T, H, dh, st.s, Precision::tf32);
      attention_backward(qkv.get(), saved.get(), dout.get(), dqkv.get(), nullptr, B, T, H, dh, st.s, Precision::tf32);
      check_colsum(dqkv.download(), B, T, 3 * D, [&](float* d, float* cs) {
        attention_backward(qkv.get(), saved.get(), dout.get(), d, nullptr, B, T, H, dh, st.s, Precision::tf32, cs);
      });
    }
  }
  // Only the tensor-core kernels write the sums: other shapes and fp32 refuse them.
  DevVec<float> dummy(4 * 70 * 3 * 80);
  float* p = dummy.get();
  CHECK_THROWS_AS(attention_backward(p, p, p, p, p, 1, 70, 1, 80, st.s, Precision::tf32, p), std::invalid_argument);
  CHECK_THROWS_AS(attention_backward(p, p, p, p, p, 1, 50, 1, 64, st.s, Precision::fp32, p), std::invalid_argument);
  CUDA_CHECK(cudaStreamSynchronize(st.s));
}

TEST_CASE("attention as batched GEMMs (--attention gemm): fp32 and tf32 match host loops", "[gpu][attention][gemm]") {
  REQUIRE_GPU();
  Stream st;
  struct Shape { int B, H, T, dh; };
  // {2, 3, 67, 13}: an odd head_dim, so the per-head pointers are only 4-byte aligned.
  for (const Shape sh : {Shape{2, 3, 197, 64}, Shape{1, 2, 257, 80}, Shape{2, 1, 70, 80}, Shape{3, 2, 1, 16},
                         Shape{1, 1, 512, 32}, Shape{2, 3, 67, 13}}) {
    for (const bool tf32 : {false, true}) {
      INFO("B=" << sh.B << " H=" << sh.H << " T=" << sh.T << " dh=" << sh.dh << (tf32 ? " tf32" : " fp32"));
      const int D = sh.H * sh.dh;
      const auto hqkv = normal_vec((size_t)sh.B * sh.T * 3 * D, 4, 0), hdo = normal_vec((size_t)sh.B * sh.T * D, 4, 1);
      const AttentionRef ref = attention_reference(hqkv, hdo, sh.B, sh.T, sh.H, sh.dh);
      DevVec<float> qkv(hqkv), probs(GemmAttention::probs_floats(sh.B, sh.T, sh.H)), out(ref.out.size()), dout(hdo),
          dqkv(ref.dqkv.size()),
          dscores(GemmAttention::dscores_floats(sh.B, sh.T, sh.H)),
          ptrs(GemmAttention::pointer_scratch_floats(sh.B, sh.H)), ws(1 << 20);
      // dqkv poisoned first: every element must be written.
      CUDA_CHECK(cudaMemset(dqkv.get(), 0xFF, ref.dqkv.size() * sizeof(float)));
      GemmAttention g(st.s, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, ws.get(), (1 << 20) * sizeof(float));
      // The row padding of probs and dS is never read: poisoned with NaN.
      CUDA_CHECK(cudaMemset(probs.get(), 0xFF, GemmAttention::probs_floats(sh.B, sh.T, sh.H) * sizeof(float)));
      CUDA_CHECK(cudaMemset(dscores.get(), 0xFF, GemmAttention::dscores_floats(sh.B, sh.T, sh.H) * sizeof(float)));
      // Half the SMs in backward (--gemm-sm-carveout's route): the same products on fewer SMs.
      g.forward(qkv.get(), probs.get(), out.get(), sh.B, sh.T, sh.H, sh.dh, ptrs.get());
      g.set_sm_count_target(g.device_sm_count() / 2);
      g.backward(qkv.get(), probs.get(), dout.get(), dqkv.get(), dscores.get(), sh.B, sh.T, sh.H, sh.dh, ptrs.get());
      g.set_sm_count_target(0);
      // Drop the padding columns: [B, H, T, probs_ld(T)] -> [B, H, T, T].
      const int ldp = GemmAttention::probs_ld(sh.T);
      CHECK(ldp % 4 == 0);
      CHECK(ldp >= sh.T);
      CHECK(ldp < sh.T + 4);
      const std::vector<float> padded = probs.download();
      std::vector<float> hp(ref.probs.size());
      for (size_t r = 0; r < (size_t)sh.B * sh.H * sh.T; ++r)
        for (int j = 0; j < sh.T; ++j) hp[r * sh.T + j] = padded[r * ldp + j];
      const double ep = norm_rel_err(hp, ref.probs), eo = norm_rel_err(out.download(), ref.out),
                   ed = norm_rel_err(dqkv.download(), ref.dqkv);
      std::printf("attention gemm %s B=%d H=%d T=%d dh=%d: norm-relative errors probs %.2e out %.2e dqkv %.2e\n",
                  tf32 ? "tf32" : "fp32", sh.B, sh.H, sh.T, sh.dh, ep, eo, ed);
      const double tol = tf32 ? 5e-3 : 1e-5;
      CHECK(ep < tol);
      CHECK(eo < tol);
      CHECK(ed < tol);
      // probs() alone (what --attention gemm-recompute runs before backward) rewrites forward's
      // probabilities bit for bit, into a buffer that held something else.
      DevVec<float> again(GemmAttention::probs_floats(sh.B, sh.T, sh.H));
      CUDA_CHECK(cudaMemset(again.get(), 0x7F, GemmAttention::probs_floats(sh.B, sh.T, sh.H) * sizeof(float)));
      g.probs(qkv.get(), again.get(), sh.B, sh.T, sh.H, sh.dh, ptrs.get());
      const std::vector<float> redone = again.download();
      size_t differ = 0;
      for (size_t r = 0; r < (size_t)sh.B * sh.H * sh.T; ++r)
        for (int j = 0; j < sh.T; ++j) differ += !(redone[r * ldp + j] == padded[r * ldp + j]);
      CHECK(differ == 0);
      // No check that tf32 rounding shows: CUBLAS_COMPUTE_32F_FAST_TF32 lets cuBLAS pick an fp32
      // kernel for a shape (measured with unpadded probability rows: T = 70 with head_dim 80, and
      // the scores at T = 197 and 257, ran in fp32; the printed errors show what runs now).
    }
  }
  Stream st2;
  GemmAttention g(st2.s, CUBLAS_COMPUTE_32F, nullptr, 0);
  DevVec<float> dummy(16);
  CHECK_THROWS_AS(g.forward(dummy.get(), dummy.get(), dummy.get(), 1, 513, 1, 64, dummy.get()), std::invalid_argument);
  CHECK_THROWS_AS(g.forward(dummy.get(), dummy.get(), dummy.get(), 0, 50, 1, 64, dummy.get()), std::invalid_argument);
  CHECK_THROWS_AS(GemmAttention(st2.s, CUBLAS_COMPUTE_16F, nullptr, 0), std::invalid_argument);
  // A null or misaligned pointer scratch, and a negative SM target, are refused before any launch.
  CHECK_THROWS_AS(g.forward(dummy.get(), dummy.get(), dummy.get(), 1, 50, 1, 64, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(g.backward(dummy.get(), dummy.get(), dummy.get(), dummy.get(), dummy.get(), 1, 50, 1, 64, dummy.get() + 1),
                  std::invalid_argument);
  CHECK_THROWS_AS(g.set_sm_count_target(-1), std::invalid_argument);
  CHECK_THROWS_AS(g.set_sm_count_target(g.device_sm_count() + 1), std::invalid_argument);
  CUDA_CHECK(cudaStreamSynchronize(st2.s));  // no launch error is left behind
}
