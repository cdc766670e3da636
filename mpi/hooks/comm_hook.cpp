#include "mpi/hooks/comm_hook.h"

namespace vitddp {

BucketCommReport GradBucket::report() const {
  BucketCommReport r;
  r.bytes_sent = bytes_;
  r.compressed = compressed_;
  for (const auto& [a, b] : compress_) r.compress_ms += interval_ms(a, b);
  for (const auto& [a, b] : allreduce_) r.allreduce_ms += interval_ms(a, b);
  for (const BucketCommReport& m : measured_) {
    r.bytes_sent += m.bytes_sent;
    r.compressed = r.compressed || m.compressed;
    r.compress_ms += m.compress_ms;
    r.allreduce_ms += m.allreduce_ms;
  }
  return r;
}

void GradBucket::reset(float* buffer) {
  buffer_ = buffer;
  last_mark_ = -1;
  fresh_ = false;
  compress_.clear();
  allreduce_.clear();
  measured_.clear();
  bytes_ = 0;
  compressed_ = false;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace vitddp
