#include "mpi/buckets/buckets.h"

#include "model/fnv1a.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace vitddp {

std::vector<Bucket> assign_buckets(const ParamLayout& L, size_t first_bytes, size_t cap_bytes) {
  if (first_bytes == 0 || cap_bytes == 0) throw std::invalid_argument("bucket size limits must be positive");
  std::vector<Bucket> out;
  Bucket cur;
  size_t cur_bytes = 0;
  auto close = [&]() {
    cur.index = out.size();
    out.push_back(cur);
    cur = Bucket();
    cur_bytes = 0;
  };
  for (size_t pi : L.ready_order()) {
    const ParamInfo& p = L.params[pi];
    if (cur.params.empty()) cur.offset = p.offset;
    cur.params.push_back(pi);
    cur_bytes += p.numel * sizeof(float);
    const size_t limit = out.empty() ? first_bytes : cap_bytes;
    if (cur_bytes >= limit) {
      cur.numel = p.offset + ((p.numel + 3) / 4 * 4) - cur.offset;
      close();
    }
  }
  if (!cur.params.empty()) {
    cur.numel = L.total - cur.offset;
    close();
  }
  // The last bucket ends at the end of the buffer (it holds the last tensor and its padding).
  out.back().numel = L.total - out.back().offset;
  return out;
}

std::vector<std::vector<FlatRange>> bucket_ranges(const ParamLayout& layout, const std::vector<Bucket>& buckets,
                                                  const std::vector<size_t>& params) {
  std::vector<char> wanted(layout.params.size(), 0);
  for (size_t p : params) wanted.at(p) = 1;
  std::vector<std::vector<FlatRange>> out;
  for (const Bucket& b : buckets) {
    std::vector<size_t> in = b.params;
    std::sort(in.begin(), in.end(), [&](size_t x, size_t y) { return layout.params[x].offset < layout.params[y].offset; });
    std::vector<FlatRange> v;
    bool open = false;  // the last tensor in offset order was wanted: extend its range
    for (size_t p : in) {
      const ParamInfo& t = layout.params[p];
      if (!wanted[p]) {
        open = false;
        continue;
      }
      if (open) v.back().count = t.offset + t.numel - v.back().offset;
      else v.push_back(FlatRange{t.offset, t.numel});
      open = true;
    }
    out.push_back(std::move(v));
  }
  return out;
}

uint64_t bucket_fingerprint(const std::vector<Bucket>& buckets) {
  Fnv1a h;
  for (const auto& b : buckets) {
    h.add(b.offset);
    h.add(b.numel);
    for (size_t p : b.params) h.add(p);
  }
  return h.value();
}

BucketTracker::BucketTracker(const ParamLayout& L, const std::vector<Bucket>& buckets)
    : bucket_of_param_(L.params.size(), SIZE_MAX), pending_(buckets.size()), size_(buckets.size()),
      param_ready_(L.params.size(), 0) {
  for (const auto& b : buckets) {
    size_[b.index] = b.params.size();
    for (size_t p : b.params) bucket_of_param_.at(p) = b.index;
  }
  reset();
}

void BucketTracker::reset() {
  pending_ = size_;
  std::fill(param_ready_.begin(), param_ready_.end(), 0);
  next_ = 0;
}

std::vector<size_t> BucketTracker::mark_ready(const std::vector<size_t>& params) {
  for (size_t p : params) {
    if (p >= param_ready_.size() || bucket_of_param_[p] == SIZE_MAX)
      throw std::logic_error("gradient ready for unknown parameter " + std::to_string(p));
    if (param_ready_[p]) throw std::logic_error("gradient of parameter " + std::to_string(p) + " marked ready twice");
    param_ready_[p] = 1;
    --pending_[bucket_of_param_[p]];
  }
  std::vector<size_t> launch;
  while (next_ < pending_.size() && pending_[next_] == 0) launch.push_back(next_++);
  return launch;
}

std::vector<size_t> BucketTracker::take_remaining() {
  std::vector<size_t> launch;
  while (next_ < pending_.size()) launch.push_back(next_++);
  return launch;
}

}  // namespace vitddp
