// ZeRO stage 1's partition of the buckets over the ranks (CUDA-free): which elements of the flat
// gradient / parameter buffer each rank reduces, updates and keeps optimizer state for.
//
// Rule (Megatron-LM's distributed optimizer, per bucket; Rajbhandari et al. 2020, "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", stage 1): bucket b of n_b elements is
// cut into chunks of c_b = ceil(n_b / N) elements on N ranks; rank r owns the contiguous flat range
// [offset_b + r c_b, offset_b + min(n_b, (r + 1) c_b)), empty for high ranks when n_b is small. A
// rank's shard is the union of its ranges over the buckets.
//
// The compact shard buffers (shard gradients, shard master parameters, shard optimizer state) give
// every bucket a slot of c_b elements, at slot offset sum_{b' < b} c_b', of which the rank's range
// fills the first count(b) elements; the rest is padding (zero). So every rank's shard buffers have
// the same size, sum_b c_b = slot_numel(), which is what NCCL's equal-count reduce-scatter and
// all-gather and MPI_Gather of the state need.
#pragma once
#include <cstddef>
#include <vector>

#include "mpi/buckets/buckets.h"

namespace vitddp {

/// c = ceil(n / world_size): the chunk of each rank in a collective over n elements (0 for n = 0).
/// Throws std::invalid_argument when world_size < 1.
size_t shard_chunk(size_t n, int world_size);

/// Elements of rank `rank`'s chunk of n: min(c, n - rank c) clamped at 0, c = shard_chunk(n, world_size).
size_t shard_count(size_t n, int world_size, int rank);

/// One bucket's part of a rank's shard.
struct ShardSlice {
  size_t bucket = 0;        ///< bucket index
  size_t flat_offset = 0;   ///< first owned element in the flat buffer: offset_b + rank c_b
  size_t count = 0;         ///< owned elements (0 when the rank owns none of this bucket)
  size_t chunk = 0;         ///< c_b: the slot size, the same on every rank
  size_t slot_offset = 0;   ///< first element of the bucket's slot in the compact shard buffers
};

/// Rank `rank`'s shard of `buckets` on `world_size` ranks. The buckets must tile the flat buffer
/// [0, total) in index order (assign_buckets' output does).
class ShardPlan {
 public:
  /// Throws std::invalid_argument when world_size < 1, rank outside [0, world_size), or the
  /// buckets do not follow each other without gap (bucket b + 1 starts where b ends, the first at 0).
  ShardPlan(const std::vector<Bucket>& buckets, int world_size, int rank);

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  /// Per bucket, in bucket order.
  const std::vector<ShardSlice>& slices() const { return slices_; }
  /// Elements this rank owns (sum of count): its true shard size.
  size_t numel() const { return numel_; }
  /// Elements of each compact shard buffer (sum of the chunks, padding included; equal on every rank).
  size_t slot_numel() const { return slot_numel_; }
  /// Elements of the flat buffer (the buckets' total).
  size_t total() const { return total_; }
  /// The slice of rank `r` in bucket `b` (what rank r's own plan holds), for the gather of a
  /// full state from every rank's compact buffer (compact offset: r * slot_numel() + slot_offset).
  ShardSlice slice_of(size_t b, int r) const;

  /// Copies this rank's owned elements of `full` (total() floats, flat layout) into `shard`
  /// (slot_numel() floats); the padding of each slot is set to 0.
  void take(const float* full, float* shard) const;
  /// Copies this rank's owned elements of `shard` back into their places in `full`.
  void put(const float* shard, float* full) const;
  /// Rebuilds the flat buffer (total() floats) from every rank's compact buffer, `all` holding
  /// rank r's slot_numel() floats at all + r * slot_numel() (what MPI_Gather of the compact
  /// buffers gives).
  void assemble(const float* all, float* full) const;

 private:
  int world_size_, rank_;
  std::vector<ShardSlice> slices_;
  std::vector<size_t> bucket_offset_, bucket_numel_;
  size_t numel_ = 0, slot_numel_ = 0, total_ = 0;
};

}  // namespace vitddp
