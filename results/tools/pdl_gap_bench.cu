// Diagnostic: what Programmatic Dependent Launch (CUDA programming guide, "Programmatic Dependent
// Launch and Synchronization"; Hopper and later) saves between the kernels of a training step
// replayed as a CUDA graph. Pairs of (cuBLASLt bf16 GEMM, memory-bound elementwise kernel) at
// ViT-L/32 batch-32 shapes (1600 x 1024 x 4096, the fc1 GEMM, then a pass over its output),
// and chains of the elementwise kernel alone, each captured 100 times into one graph; the
// elementwise kernel is launched plainly or with cudaLaunchAttributeProgrammaticStreamSerialization
// (it waits with griddepcontrol.wait before it reads, and lets its own dependent start with
// griddepcontrol.launch_dependents at its start, or not). Prints microseconds per pair / per kernel
// (median of 15 replays): plain, PDL, PDL with the early trigger.
// Build: nvcc -O2 -arch=sm_90 -o pdl_gap_bench pdl_gap_bench.cu -lcublasLt ; run: ./pdl_gap_bench
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tool_check.cuh"

#define CKB(x)                                                                            \
  do {                                                                                    \
    cublasStatus_t st_ = (x);                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                   \
      std::fprintf(stderr, "%s:%d %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, (int)st_); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

using bf16 = __nv_bfloat16;

// y = 2 x + 1 over n bf16 (8 per thread), reading x only after the grid dependency is resolved;
// kEarly: lets the next kernel's blocks launch at once (else when this grid's blocks have exited).
template <bool kEarly>
__global__ void scale_kernel(const bf16* __restrict__ x, bf16* __restrict__ y, size_t n) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (kEarly) asm volatile("griddepcontrol.launch_dependents;");
  const size_t i = 8 * ((size_t)blockIdx.x * blockDim.x + threadIdx.x);
  if (i + 8 > n) return;
  uint4 v = *reinterpret_cast<const uint4*>(x + i);
  bf16* e = reinterpret_cast<bf16*>(&v);
  for (int k = 0; k < 8; ++k) e[k] = __float2bfloat16(2.0f * __bfloat162float(e[k]) + 1.0f);
  *reinterpret_cast<uint4*>(y + i) = v;
}

void launch_scale(const bf16* x, bf16* y, size_t n, int pdl, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)((n / 8 + 255) / 256));
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  if (pdl == 2) CK(cudaLaunchKernelEx(&cfg, scale_kernel<true>, x, y, n));
  else CK(cudaLaunchKernelEx(&cfg, scale_kernel<false>, x, y, n));
}

struct Gemm {  // D[m x n] = A[m x k] B[k x n], row-major bf16, fp32 accumulation
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulAlgo_t algo;
  void* ws;
  size_t ws_bytes = 32 << 20;
  Gemm(int m, int n, int k) {
    CKB(cublasLtCreate(&lt));
    CKB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // Column-major view: D^T[n x m] = B^T[n x k] A^T[k x m].
    CKB(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, n, k, n));
    CKB(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, m, k));
    CKB(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, n, m, n));
    CK(cudaMalloc(&ws, ws_bytes));
    cublasLtMatmulPreference_t pref;
    CKB(cublasLtMatmulPreferenceCreate(&pref));
    CKB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    CKB(cublasLtMatmulAlgoGetHeuristic(lt, op, b, a, d, d, pref, 1, &r, &found));
    if (!found) {
      std::fprintf(stderr, "no cuBLASLt algorithm\n");
      std::exit(1);
    }
    algo = r.algo;
  }
  void run(const bf16* A, const bf16* B, bf16* D, cudaStream_t s) {
    const float one = 1.0f, zero = 0.0f;
    CKB(cublasLtMatmul(lt, op, &one, B, b, A, a, &zero, D, d, D, d, &algo, ws, ws_bytes, s));
  }
};

// Median microseconds of one replay of `g`, divided by `per`.
double time_graph(cudaGraphExec_t g, cudaStream_t s, int per) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(g, s));
  std::vector<double> t;
  for (int r = 0; r < 15; ++r) {
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(g, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(1000.0 * ms / per);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <class F>
cudaGraphExec_t capture(cudaStream_t s, F&& body) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  body();
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e;
  CK(cudaGraphInstantiate(&e, g, 0));
  return e;
}

int main() {
  const int m = 1600, k = 1024, n = 4096, reps = 100;
  const size_t big = (size_t)m * n, small = (size_t)m * k;
  bf16 *A, *B, *D, *Y;
  CK(cudaMalloc(&A, small * sizeof(bf16)));
  CK(cudaMalloc(&B, (size_t)k * n * sizeof(bf16)));
  CK(cudaMalloc(&D, big * sizeof(bf16)));
  CK(cudaMalloc(&Y, big * sizeof(bf16)));
  CK(cudaMemset(A, 0, small * sizeof(bf16)));
  CK(cudaMemset(B, 0, (size_t)k * n * sizeof(bf16)));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Gemm gemm(m, n, k);
  std::printf("%-44s %10s %10s %10s\n", "sequence (x100 in one CUDA graph)", "plain us", "PDL us", "PDL+trigger");
  for (size_t elems : {big, small}) {
    double t[3], c[3];
    for (int pdl = 0; pdl < 3; ++pdl) {
      cudaGraphExec_t g = capture(s, [&] {
        for (int i = 0; i < reps; ++i) {
          gemm.run(A, B, D, s);
          launch_scale(D, Y, elems, pdl, s);
        }
      });
      t[pdl] = time_graph(g, s, reps);
      cudaGraphExec_t h = capture(s, [&] {
        for (int i = 0; i < reps; ++i) launch_scale(i % 2 ? Y : D, i % 2 ? D : Y, elems, pdl, s);
      });
      c[pdl] = time_graph(h, s, reps);
    }
    const double mb = 2.0 * elems * sizeof(bf16) / 1e6;
    std::printf("GEMM %dx%dx%d + elementwise %6.1f MB    %10.2f %10.2f %10.2f\n", m, k, n, mb, t[0], t[1], t[2]);
    std::printf("elementwise %6.1f MB alone, chained         %10.2f %10.2f %10.2f\n", mb, c[0], c[1], c[2]);
  }
  return 0;
}
