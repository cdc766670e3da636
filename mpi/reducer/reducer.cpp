#include "mpi/reducer/reducer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "src/io/nvtx.h"

namespace vitddp {

Reducer::Reducer(const ParamLayout& layout, std::vector<Bucket> buckets, bool overlap)
    : buckets_(std::move(buckets)), tracker_(layout, buckets_), overlap_(overlap) {}

void Reducer::mark_ready(const std::vector<size_t>& params) {
  for (size_t b : tracker_.mark_ready(params))
    if (overlap_) launch(b);
}

void Reducer::launch(size_t b) {
  if (!hook_ || !backend_) throw std::logic_error("Reducer: launch before attach()");
  NvtxRange range(std::string(hook_->collective()) + " bucket " + std::to_string(b), NvtxColor::Orange);
  hook_->run(backend_->start_bucket(b));
}

void Reducer::finalize() {
  // With overlap every complete bucket is already launched (the rest start here); with
  // --no-overlap the tracker saw them complete but none was launched: all of them start here.
  const std::vector<size_t> remaining = tracker_.take_remaining();
  if (overlap_) {
    for (size_t b : remaining) launch(b);
  } else {
    for (size_t b = 0; b < buckets_.size(); ++b) launch(b);
  }
  backend_->finish_buckets();
  hook_->end_step();
}

size_t max_bucket_numel(const std::vector<Bucket>& buckets) {
  size_t n = 0;
  for (const auto& b : buckets) n = std::max(n, b.numel);
  return n;
}

}  // namespace vitddp
