// Helpers shared by the GPU tests: device check, RAII device vectors and streams, random inputs,
// kernel timing; the error norms come from tests/test_util.h.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/event_pair.h"
#include "model/init.h"
#include "model/param_layout.h"
#include "model/rng.h"
#include "tests/catch.h"
#include "tests/test_util.h"

namespace vitddp_test {

/// FAILs the current test case with a clear message when no CUDA device is visible (these tests
/// only run where a GPU exists; CI excludes the 'gpu' label).
#define REQUIRE_GPU()                                                                        \
  do {                                                                                       \
    int n_dev_ = 0;                                                                          \
    const cudaError_t e_ = cudaGetDeviceCount(&n_dev_);                                      \
    if (e_ != cudaSuccess || n_dev_ == 0) {                                                  \
      (void)cudaGetLastError();                                                              \
      FAIL("no CUDA device visible (cudaGetDeviceCount: "                                    \
           << cudaGetErrorString(e_) << ", " << n_dev_                                       \
           << " devices): gpu_tests need an NVIDIA GPU; run them on a GPU machine");         \
    }                                                                                        \
  } while (0)

/// A device array of T (cudaMalloc / cudaFree), with host copies in and out.
template <typename T>
class DevVec {
 public:
  explicit DevVec(size_t n) : n_(n) { CUDA_CHECK(cudaMalloc(&p_, (n ? n : 1) * sizeof(T))); }
  explicit DevVec(const std::vector<T>& h) : DevVec(h.size()) { upload(h); }
  ~DevVec() { cudaFree(p_); }
  DevVec(const DevVec&) = delete;
  DevVec& operator=(const DevVec&) = delete;
  T* get() const { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& h) {
    REQUIRE(h.size() == n_);
    CUDA_CHECK(cudaDeviceSynchronize());  // the tests' streams do not sync with the legacy one
    CUDA_CHECK(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

/// n standard-normal floats of stream `stream` under `seed`, times `scale`.
inline std::vector<float> normal_vec(size_t n, uint64_t seed, uint64_t stream, double scale = 1.0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * vitddp::rand_normal(seed, stream, i));
  return v;
}

/// A non-blocking CUDA stream, destroyed at scope exit.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
};

/// Mean milliseconds of fn() over `iters` runs on `st` after 3 warm-up runs.
inline double time_ms(cudaStream_t st, const std::function<void()>& fn, int iters = 20) {
  for (int i = 0; i < 3; ++i) fn();
  vitddp::EventPair ev;
  ev.record_start(st);
  for (int i = 0; i < iters; ++i) fn();
  ev.record_stop(st);
  return ev.elapsed_ms() / iters;
}

/// Device inputs of a training-step benchmark of layout `L` at batch `B`: torchvision-initialised
/// parameters (seed 0; host copy kept for re-uploads), fp32 gradients, random images and labels
/// (seed 1), a one-float loss.
struct StepInputs {
  std::vector<float> host_params;
  DevVec<float> params, grads, images, loss;
  DevVec<int32_t> labels;
  StepInputs(const vitddp::ParamLayout& L, int B)
      : host_params(initial(L)), params(host_params), grads(L.total), images(random_images(L.cfg, B, 1)), loss(1),
        labels(random_labels(L.cfg, B, 1)) {}

 private:
  static std::vector<float> initial(const vitddp::ParamLayout& L) {
    std::vector<float> p(L.total);
    vitddp::init_params(L, vitddp::InitScheme::Torchvision, 0, p.data());
    return p;
  }
};

}  // namespace vitddp_test
