#include "cuda/kernels/attention_gemm.h"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/check/check_cublaslt.h"
#include "cuda/check/check_cuda.h"
#include "cuda/kernels/block_reduce.cuh"

namespace vitddp {
namespace {

constexpr int kMaxRow = 512;          // T limit: 16 values per lane
constexpr int kPerLane = kMaxRow / 32;
constexpr int kRowWarps = 8;          // rows per block of the row kernels

// Where one operand of a batched product starts for (batch b, head h): base + b * per_batch + h * per_head.
struct Operand {
  const float* base;
  long long per_batch, per_head;
};
// The three operands (A, B, C) of up to four products.
struct PointerPlan {
  Operand op[4][3];
  int products;
};

// out[(g * 3 + x) * B*H + b*H + h] = the address of operand x of product g for (b, h).
__global__ void fill_pointers_kernel(PointerPlan plan, int batch, int heads, const float** out) {
  const int bh = blockIdx.x * blockDim.x + threadIdx.x, n = batch * heads;
  if (bh >= n) return;
  const int b = bh / heads, h = bh % heads;
  for (int g = 0; g < plan.products; ++g)
    for (int x = 0; x < 3; ++x) {
      const Operand& o = plan.op[g][x];
      out[(size_t)(g * 3 + x) * n + bh] = o.base + (long long)b * o.per_batch + (long long)h * o.per_head;
    }
}

// p[r, :T] = softmax(p[r, :T]) for `rows` rows of stride ld, one warp a row.
__global__ void __launch_bounds__(kRowWarps * 32) softmax_rows_kernel(float* p, long long rows, int T, int ld) {
  const long long r = (long long)blockIdx.x * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  float* row = p + r * ld;
  float v[kPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int j = lane + 32 * i;
    v[i] = j < T ? row[j] : -INFINITY;
    mx = fmaxf(mx, v[i]);
  }
  mx = warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int j = lane + 32 * i;
    v[i] = j < T ? expf(v[i] - mx) : 0.0f;
    sum += v[i];
  }
  sum = warp_sum(sum);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int j = lane + 32 * i;
    if (j < T) row[j] = v[i] / sum;
  }
}

// ds[r, :T] = p[r, :T] * (ds[r, :T] - sum_k p[r, k] ds[r, k]) (ds holds dP on entry), rows of
// stride ld, one warp a row.
__global__ void __launch_bounds__(kRowWarps * 32)
    softmax_backward_rows_kernel(const float* __restrict__ p, float* __restrict__ ds, long long rows, int T, int ld) {
  const long long r = (long long)blockIdx.x * kRowWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* prow = p + r * ld;
  float* drow = ds + r * ld;
  float pv[kPerLane], dv[kPerLane];
  float dot = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int j = lane + 32 * i;
    pv[i] = j < T ? prow[j] : 0.0f;
    dv[i] = j < T ? drow[j] : 0.0f;
    dot += pv[i] * dv[i];
  }
  dot = warp_sum(dot);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int j = lane + 32 * i;
    if (j < T) drow[j] = pv[i] * (dv[i] - dot);
  }
}

void check_call(int batch, int T, int heads, int head_dim, const float* scratch, const char* who) {
  if (batch < 1 || heads < 1 || T < 1 || T > kMaxRow || head_dim < 1 || (long long)batch * heads > (1LL << 30))
    throw std::invalid_argument(std::string(who) + ": unsupported shape B=" + std::to_string(batch) + " T=" +
                                std::to_string(T) + " H=" + std::to_string(heads) + " dh=" + std::to_string(head_dim) +
                                " (need 1 <= T <= 512, head_dim >= 1, B, H >= 1, B*H <= 2^30)");
  if (scratch == nullptr || reinterpret_cast<uintptr_t>(scratch) % alignof(const float*) != 0)
    throw std::invalid_argument(std::string(who) + ": the pointer scratch must be non-null and " +
                                std::to_string(alignof(const float*)) + "-byte aligned");
}

unsigned row_blocks(long long rows) { return (unsigned)((rows + kRowWarps - 1) / kRowWarps); }

}  // namespace

GemmAttention::GemmAttention(cudaStream_t stream, cublasComputeType_t compute, void* workspace,
                             size_t workspace_bytes)
    : stream_(stream), compute_(compute) {
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC && compute != CUBLAS_COMPUTE_32F_FAST_TF32)
    throw std::invalid_argument("GemmAttention: compute type must be CUBLAS_COMPUTE_32F, _32F_PEDANTIC or _32F_FAST_TF32");
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&device_sms_, cudaDevAttrMultiProcessorCount, device));
  CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    CUBLAS_CHECK(cublasSetStream(handle_, stream));
    // The caller's workspace (or none): cuBLAS allocates nothing itself while a graph is captured.
    CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace, workspace_bytes));
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}

void GemmAttention::set_sm_count_target(int n) {
  if (n < 0 || n > device_sms_)
    throw std::invalid_argument("GemmAttention::set_sm_count_target: " + std::to_string(n) + " outside [0, " +
                                std::to_string(device_sms_) + "] (the device's SM count)");
  CUBLAS_CHECK(cublasSetSmCountTarget(handle_, n));
}

GemmAttention::~GemmAttention() {
  if (handle_) cublasDestroy(handle_);
}

size_t GemmAttention::pointer_scratch_floats(int batch, int heads) {
  constexpr size_t kFloatsPerPointer = sizeof(const float*) / sizeof(float);  // 2 on a 64-bit host
  return (size_t)12 * (size_t)batch * (size_t)heads * kFloatsPerPointer;
}

namespace {

// One batched product in cuBLAS's column-major terms, fp32 operands and output, on the pointer
// arrays of product g in `ptrs` (fill_pointers_kernel's layout).
void batched(cublasHandle_t h, cublasComputeType_t compute, bool ta, bool tb, int m, int n, int k, float alpha,
             int lda, int ldb, int ldc, const float** ptrs, int g, int count) {
  const float beta = 0.0f;
  const float* const* a = ptrs + (size_t)(g * 3 + 0) * count;
  const float* const* b = ptrs + (size_t)(g * 3 + 1) * count;
  float* const* c = const_cast<float* const*>(ptrs + (size_t)(g * 3 + 2) * count);
  CUBLAS_CHECK(cublasGemmBatchedEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
                                   reinterpret_cast<const void* const*>(a), CUDA_R_32F, lda,
                                   reinterpret_cast<const void* const*>(b), CUDA_R_32F, ldb, &beta,
                                   reinterpret_cast<void* const*>(c), CUDA_R_32F, ldc, count, compute,
                                   CUBLAS_GEMM_DEFAULT));
}

void fill(const PointerPlan& plan, int batch, int heads, float* scratch, cudaStream_t s) {
  const int n = batch * heads;
  fill_pointers_kernel<<<(n + 127) / 128, 128, 0, s>>>(plan, batch, heads, reinterpret_cast<const float**>(scratch));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

// Row-major X [r x c] with leading dimension ld is column-major X^T [c x r] with the same ld, so
// each row-major product below is written as its transpose: S^T = K Q^T (A = K stored as K^T,
// transposed; B = Q^T), O^T = V^T P^T, and likewise in backward.
void GemmAttention::forward(const float* qkv, float* probs, float* out, int batch, int T, int heads, int head_dim,
                            float* scratch) {
  check_call(batch, T, heads, head_dim, scratch, "GemmAttention::forward");
  scores_softmax(qkv, probs, out, batch, T, heads, head_dim, scratch);
}

void GemmAttention::probs(const float* qkv, float* probs, int batch, int T, int heads, int head_dim, float* scratch) {
  check_call(batch, T, heads, head_dim, scratch, "GemmAttention::probs");
  scores_softmax(qkv, probs, nullptr, batch, T, heads, head_dim, scratch);
}

void GemmAttention::scores_softmax(const float* qkv, float* probs, float* out, int batch, int T, int heads,
                                   int head_dim, float* scratch) {
  const int D = heads * head_dim, n = batch * heads, ldp = probs_ld(T);
  const long long row3 = (long long)T * 3 * D, tt = (long long)T * ldp;
  PointerPlan plan{};
  plan.products = out ? 2 : 1;
  // S = Q K^T / sqrt(dh): A = K, B = Q, C = probs[b, h].
  plan.op[0][0] = {qkv + D, row3, head_dim};
  plan.op[0][1] = {qkv, row3, head_dim};
  plan.op[0][2] = {probs, tt * heads, tt};
  // O = P V: A = V, B = P, C = out (head h's columns).
  plan.op[1][0] = {qkv + 2 * D, row3, head_dim};
  plan.op[1][1] = {probs, tt * heads, tt};
  plan.op[1][2] = {out, (long long)T * D, head_dim};
  fill(plan, batch, heads, scratch, stream_);
  const float** ptrs = reinterpret_cast<const float**>(scratch);
  const float scale = 1.0f / std::sqrt((float)head_dim);
  batched(handle_, compute_, true, false, T, T, head_dim, scale, 3 * D, 3 * D, ldp, ptrs, 0, n);
  softmax_rows_kernel<<<row_blocks((long long)n * T), kRowWarps * 32, 0, stream_>>>(probs, (long long)n * T, T, ldp);
  CUDA_CHECK_LAUNCH();
  if (out) batched(handle_, compute_, false, false, head_dim, T, T, 1.0f, 3 * D, ldp, D, ptrs, 1, n);
}

void GemmAttention::backward(const float* qkv, const float* probs, const float* dout, float* dqkv, float* dscores,
                             int batch, int T, int heads, int head_dim, float* scratch) {
  check_call(batch, T, heads, head_dim, scratch, "GemmAttention::backward");
  const int D = heads * head_dim, n = batch * heads, ldp = probs_ld(T);
  const long long row3 = (long long)T * 3 * D, rowd = (long long)T * D, tt = (long long)T * ldp;
  const Operand q{qkv, row3, head_dim}, k{qkv + D, row3, head_dim}, v{qkv + 2 * D, row3, head_dim};
  const Operand p{probs, tt * heads, tt}, ds{dscores, tt * heads, tt}, d_o{dout, rowd, head_dim};
  PointerPlan plan{};
  plan.products = 4;
  // dV = P^T dO: A = dO, B = P (transposed), C = dV.
  plan.op[0][0] = d_o;
  plan.op[0][1] = p;
  plan.op[0][2] = {dqkv + 2 * D, row3, head_dim};
  // dP = dO V^T: A = V (transposed), B = dO, C = dscores.
  plan.op[1][0] = v;
  plan.op[1][1] = d_o;
  plan.op[1][2] = ds;
  // dQ = dS K / sqrt(dh): A = K, B = dS, C = dQ.
  plan.op[2][0] = k;
  plan.op[2][1] = ds;
  plan.op[2][2] = {dqkv, row3, head_dim};
  // dK = dS^T Q / sqrt(dh): A = Q, B = dS (transposed), C = dK.
  plan.op[3][0] = q;
  plan.op[3][1] = ds;
  plan.op[3][2] = {dqkv + D, row3, head_dim};
  fill(plan, batch, heads, scratch, stream_);
  const float** ptrs = reinterpret_cast<const float**>(scratch);
  const float scale = 1.0f / std::sqrt((float)head_dim);
  batched(handle_, compute_, false, true, head_dim, T, T, 1.0f, D, ldp, 3 * D, ptrs, 0, n);
  batched(handle_, compute_, true, false, T, T, head_dim, 1.0f, 3 * D, D, ldp, ptrs, 1, n);
  softmax_backward_rows_kernel<<<row_blocks((long long)n * T), kRowWarps * 32, 0, stream_>>>(
      probs, dscores, (long long)n * T, T, ldp);
  CUDA_CHECK_LAUNCH();
  batched(handle_, compute_, false, false, head_dim, T, T, scale, 3 * D, ldp, 3 * D, ptrs, 2, n);
  batched(handle_, compute_, false, true, head_dim, T, T, scale, 3 * D, ldp, 3 * D, ptrs, 3, n);
}

}  // namespace vitddp
