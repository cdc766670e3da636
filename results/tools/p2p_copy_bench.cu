// Diagnostic: bandwidth of peer-to-peer cudaMemcpyAsync over
// NVLink between GPU 0 and GPU 1 of one process, the way --allreduce copy-engine pushes its chunks:
// a copy from a local buffer into the peer's, split into k equal pieces on k streams (k = 1, 2, 4,
// 8), one direction or both at once. Prints GB/s per direction (bytes / time, median of 10 rounds).
// Build: nvcc -O2 -arch=sm_90 -o p2p_copy_bench p2p_copy_bench.cu ; run: ./p2p_copy_bench [MiB...]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tool_check.cuh"

int main(int argc, char** argv) {
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    std::fprintf(stderr, "p2p_copy_bench: needs 2 GPUs, found %d\n", n);
    return 1;
  }
  std::vector<size_t> mib;
  for (int i = 1; i < argc; ++i) mib.push_back(std::strtoul(argv[i], nullptr, 10));
  if (mib.empty()) mib = {16, 64};
  const size_t max_bytes = *std::max_element(mib.begin(), mib.end()) << 20;
  void *src[2], *dst[2];
  std::vector<cudaStream_t> streams[2];
  cudaEvent_t start[2], stop[2];
  for (int d = 0; d < 2; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    CK(cudaMalloc(&src[d], max_bytes));
    CK(cudaMalloc(&dst[d], max_bytes));
    CK(cudaMemset(src[d], 1, max_bytes));
    streams[d].resize(8);
    for (auto& s : streams[d]) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&start[d]));
    CK(cudaEventCreate(&stop[d]));
  }
  std::printf("| MiB | directions | streams | GB/s per direction |\n| --- | --- | --- | --- |\n");
  for (size_t m : mib) {
    const size_t bytes = m << 20;
    for (int dirs = 1; dirs <= 2; ++dirs)
      for (int k : {1, 2, 4, 8}) {
        std::vector<float> times;
        for (int round = 0; round < 12; ++round) {
          for (int d = 0; d < dirs; ++d) {
            CK(cudaSetDevice(d));
            CK(cudaDeviceSynchronize());
          }
          for (int d = 0; d < dirs; ++d) {
            CK(cudaSetDevice(d));
            CK(cudaEventRecord(start[d], streams[d][0]));
            for (int j = 1; j < k; ++j) CK(cudaStreamWaitEvent(streams[d][j], start[d], 0));
            const size_t piece = bytes / k;
            for (int j = 0; j < k; ++j)
              CK(cudaMemcpyAsync(static_cast<char*>(dst[1 - d]) + j * piece, static_cast<char*>(src[d]) + j * piece,
                                 j == k - 1 ? bytes - j * piece : piece, cudaMemcpyDeviceToDevice, streams[d][j]));
            for (int j = 1; j < k; ++j) {
              cudaEvent_t e;
              CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
              CK(cudaEventRecord(e, streams[d][j]));
              CK(cudaStreamWaitEvent(streams[d][0], e, 0));
              CK(cudaEventDestroy(e));
            }
            CK(cudaEventRecord(stop[d], streams[d][0]));
          }
          float worst = 0;
          for (int d = 0; d < dirs; ++d) {
            CK(cudaSetDevice(d));
            CK(cudaEventSynchronize(stop[d]));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, start[d], stop[d]));
            worst = std::max(worst, ms);
          }
          if (round >= 2) times.push_back(worst);  // two warm-up rounds
        }
        std::sort(times.begin(), times.end());
        const float med = times[times.size() / 2];
        std::printf("| %zu | %d | %d | %.0f |\n", m, dirs, k, bytes / (med * 1e-3) / 1e9);
      }
  }
  return 0;
}
