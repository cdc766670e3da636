// Helpers shared by the GPU tests: device check, RAII device vectors, error norms.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "model/rng.h"
#include "tests/catch.h"

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

/// ||a - b|| / ||b|| over the first n entries (b is the reference); 0 when both are zero.
template <typename A, typename B>
double norm_rel_err(const A* a, const B* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  if (den == 0) return num == 0 ? 0.0 : INFINITY;
  return std::sqrt(num / den);
}

template <typename A, typename B>
double norm_rel_err(const std::vector<A>& a, const std::vector<B>& b) {
  REQUIRE(a.size() == b.size());
  return norm_rel_err(a.data(), b.data(), a.size());
}

}  // namespace vitddp_test
