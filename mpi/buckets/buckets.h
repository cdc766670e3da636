// DDP bucket assignment over the flat gradient buffer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/param_layout.h"

namespace vitddp {

/// A contiguous slice [offset, offset + numel) of the flat gradient buffer (elements), holding
/// whole parameter tensors. Because the layout is in gradient-ready order, the gradients *are*
/// the bucket (PyTorch's gradient_as_bucket_view=True) with no copy.
struct Bucket {
  size_t index = 0;
  size_t offset = 0;              ///< first element
  size_t numel = 0;               ///< elements, layout padding included
  std::vector<size_t> params;     ///< registration indices, in gradient-ready order
  size_t bytes() const { return numel * sizeof(float); }
};

/// PyTorch DDP's assignment (torch.distributed._compute_bucket_assignment_by_size as DDP uses it
/// once it has rebuilt its buckets in gradient-ready order after the first iteration): walk the
/// parameters in gradient-ready order (reverse registration order), add each tensor whole to the
/// current bucket, and close the bucket as soon as its size reaches the current limit (so it may
/// overshoot by one tensor). The first bucket's limit is `first_bucket_bytes` (PyTorch: 1 MiB),
/// every later one `bucket_cap_bytes` (bucket_cap_mb * 2^20). Buckets launch in this order.
/// Throws std::invalid_argument if a limit is 0.
std::vector<Bucket> assign_buckets(const ParamLayout& layout, size_t first_bucket_bytes,
                                   size_t bucket_cap_bytes);

/// A run [offset, offset + count) of the flat buffer, in elements.
struct FlatRange {
  size_t offset = 0;
  size_t count = 0;
};

/// Per bucket (index order): the flat ranges of the tensors `params` (registration indices) that
/// the bucket holds, in offset order, tensors that follow each other in the bucket (nothing but
/// layout padding between them) merged into one range, which then covers that padding too.
/// Throws std::out_of_range for an index outside layout.params.
std::vector<std::vector<FlatRange>> bucket_ranges(const ParamLayout& layout, const std::vector<Bucket>& buckets,
                                                  const std::vector<size_t>& params);

/// FNV-1a hash of the bucket table (offsets, sizes, parameter indices): ranks compare it at start-up
/// so that a rank with another layout fails fast instead of all-reducing mismatched buffers.
uint64_t bucket_fingerprint(const std::vector<Bucket>& buckets);

/// Tracks which parameters of the current backward are ready and which buckets may launch.
/// Buckets launch strictly in index order (as c10d::Reducer does), so a complete bucket waits for
/// all earlier ones to be complete too.
class BucketTracker {
 public:
  BucketTracker(const ParamLayout& layout, const std::vector<Bucket>& buckets);
  /// Forgets all readiness: call before every backward.
  void reset();
  /// Marks parameters ready. Returns the indices of buckets that have become launchable, in
  /// order. Throws std::logic_error if a parameter is marked twice in one backward.
  std::vector<size_t> mark_ready(const std::vector<size_t>& params);
  /// Buckets not launched yet (in order); marks them launched. For --no-overlap and as a safety net.
  std::vector<size_t> take_remaining();
  size_t launched() const { return next_; }

 private:
  std::vector<size_t> bucket_of_param_;
  std::vector<size_t> pending_;      ///< per bucket: parameters not yet ready
  std::vector<size_t> size_;         ///< per bucket: number of parameters
  std::vector<char> param_ready_;
  size_t next_ = 0;                  ///< next bucket to launch
};

}  // namespace vitddp
