// CUDA events around one bucket's communication work in one step, for the per-bucket timings.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "mpi/comm_hooks.h"

namespace vitddp {

/// A pool of timing events recorded in order on the bucket's comm stream while its hook is
/// enqueued, and which intervals between them were compression work or all-reduce calls.
/// start = the first event of the step, end = the last. Reading needs the events completed.
class BucketTimeline {
 public:
  /// Creates `capacity` timing events. Throws std::runtime_error on CUDA failure.
  explicit BucketTimeline(int capacity = 8);
  ~BucketTimeline();
  BucketTimeline(const BucketTimeline&) = delete;
  BucketTimeline& operator=(const BucketTimeline&) = delete;

  /// Forgets the last step's marks (call before enqueuing the bucket's work).
  void reset();
  /// Records the next event on `stream`; returns its index. Throws std::logic_error when the
  /// pool is exhausted.
  int mark(cudaStream_t stream);
  /// Marks [a, b] as compression / decompression work.
  void compress(int a, int b) { compress_.emplace_back(a, b); }
  /// Marks [a, b] as all-reduce calls that sent `bytes` payload bytes.
  void allreduce(int a, int b, uint64_t bytes) {
    allreduce_.emplace_back(a, b);
    bytes_ += bytes;
  }
  void set_compressed(bool c) { compressed_ = c; }

  bool empty() const { return used_ == 0; }
  /// Milliseconds from `ref` to the first / last event (ref must precede them and be completed).
  double start_ms(cudaEvent_t ref) const;
  double end_ms(cudaEvent_t ref) const;
  /// Bytes, compressed flag and the summed compress / all-reduce intervals.
  BucketCommReport report() const;

 private:
  std::vector<cudaEvent_t> events_;
  int used_ = 0;
  std::vector<std::pair<int, int>> compress_, allreduce_;
  uint64_t bytes_ = 0;
  bool compressed_ = false;
};

}  // namespace vitddp
