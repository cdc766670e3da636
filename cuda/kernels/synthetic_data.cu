#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda/check/check_cuda.h"
#include "cuda/kernels/synthetic_data.h"

namespace vitddp {
namespace {

// One thread per pair of image values (grid-stride); threads with i < batch also write label i.
__global__ void synthetic_batch_kernel(float* __restrict__ images, int32_t* __restrict__ labels, size_t n_values,
                                       int batch, int num_classes, uint64_t seed, int rank, int64_t step) {
  const size_t n_pairs = (n_values + 1) / 2;
  const size_t n_items = n_pairs > (size_t)batch ? n_pairs : (size_t)batch;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < n_items; p += stride) {
    if (p < n_pairs) {
      float z0, z1;
      synthetic_normal_pair(seed, rank, step, p, &z0, &z1);
      images[2 * p] = z0;
      if (2 * p + 1 < n_values) images[2 * p + 1] = z1;
    }
    if (p < (size_t)batch) labels[p] = synthetic_label(seed, rank, step, (int64_t)p, num_classes);
  }
}

}  // namespace

DeviceSyntheticSource::DeviceSyntheticSource(int batch, size_t image_elems, int num_classes, uint64_t seed, int rank)
    : batch_(batch), image_elems_(image_elems), num_classes_(num_classes), seed_(seed), rank_(rank) {
  if (batch < 1 || image_elems < 1 || num_classes < 1 || rank < 0 || rank >= 65536)
    throw std::invalid_argument("DeviceSyntheticSource: needs batch >= 1, image_elems >= 1, num_classes >= 1 and "
                                "0 <= rank < 65536; got batch=" + std::to_string(batch) + " image_elems=" +
                                std::to_string(image_elems) + " num_classes=" + std::to_string(num_classes) +
                                " rank=" + std::to_string(rank));
}

void DeviceSyntheticSource::generate(int64_t step, float* d_images, int32_t* d_labels, cudaStream_t stream) const {
  if (step < 0 || step >= (int64_t{1} << 47))
    throw std::invalid_argument("DeviceSyntheticSource::generate: step " + std::to_string(step) + " outside [0, 2^47)");
  const size_t n_values = (size_t)batch_ * image_elems_;
  const size_t n_threads = std::max((n_values + 1) / 2, (size_t)batch_);  // pairs, and one per label
  const int threads = 256;
  const int blocks = (int)std::min<size_t>((n_threads + threads - 1) / threads, 132 * 32);
  synthetic_batch_kernel<<<blocks, threads, 0, stream>>>(d_images, d_labels, n_values, batch_, num_classes_, seed_,
                                                         rank_, step);
  CUDA_CHECK_LAUNCH();
}

}  // namespace vitddp
