#include "mpi/buckets/shard_plan.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace vitddp {

size_t shard_chunk(size_t n, int world_size) {
  if (world_size < 1) throw std::invalid_argument("shard_chunk: world size " + std::to_string(world_size) + " < 1");
  return (n + (size_t)world_size - 1) / (size_t)world_size;
}

size_t shard_count(size_t n, int world_size, int rank) {
  const size_t c = shard_chunk(n, world_size), first = (size_t)rank * c;
  return first >= n ? 0 : std::min(c, n - first);
}

ShardPlan::ShardPlan(const std::vector<Bucket>& buckets, int world_size, int rank)
    : world_size_(world_size), rank_(rank) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("ShardPlan: rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                                " ranks");
  for (const Bucket& b : buckets) {
    if (b.offset != total_)
      throw std::invalid_argument("ShardPlan: bucket " + std::to_string(b.index) + " starts at element " +
                                  std::to_string(b.offset) + ", expected " + std::to_string(total_) +
                                  " (buckets must tile the flat buffer in order)");
    ShardSlice s;
    s.bucket = slices_.size();
    s.chunk = shard_chunk(b.numel, world_size);
    s.count = shard_count(b.numel, world_size, rank);
    s.flat_offset = b.offset + std::min(b.numel, (size_t)rank * s.chunk);
    s.slot_offset = slot_numel_;
    slices_.push_back(s);
    bucket_offset_.push_back(b.offset);
    bucket_numel_.push_back(b.numel);
    numel_ += s.count;
    slot_numel_ += s.chunk;
    total_ += b.numel;
  }
}

ShardSlice ShardPlan::slice_of(size_t b, int r) const {
  ShardSlice s = slices_.at(b);
  const size_t n = bucket_numel_[b];
  s.count = shard_count(n, world_size_, r);
  s.flat_offset = bucket_offset_[b] + std::min(n, (size_t)r * s.chunk);
  return s;
}

void ShardPlan::take(const float* full, float* shard) const {
  for (const ShardSlice& s : slices_) {
    std::memcpy(shard + s.slot_offset, full + s.flat_offset, s.count * sizeof(float));
    std::fill(shard + s.slot_offset + s.count, shard + s.slot_offset + s.chunk, 0.0f);
  }
}

void ShardPlan::put(const float* shard, float* full) const {
  for (const ShardSlice& s : slices_) std::memcpy(full + s.flat_offset, shard + s.slot_offset, s.count * sizeof(float));
}

void ShardPlan::assemble(const float* all, float* full) const {
  for (int r = 0; r < world_size_; ++r)
    for (size_t b = 0; b < slices_.size(); ++b) {
      const ShardSlice s = slice_of(b, r);
      std::memcpy(full + s.flat_offset, all + (size_t)r * slot_numel_ + s.slot_offset, s.count * sizeof(float));
    }
}

}  // namespace vitddp
