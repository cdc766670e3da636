// ZeRO-1's shard rule (mpi/buckets/shard_plan.h): per bucket chunks of ceil(n_b / N), every
// element owned by exactly one rank, and the compact buffers' take / put / assemble.
#include <numeric>
#include <vector>

#include "model/param_layout.h"
#include "mpi/buckets/buckets.h"
#include "mpi/buckets/shard_plan.h"
#include "tests/catch.h"

using namespace vitddp;

namespace {

/// Buckets of the given sizes, tiling [0, sum) in order.
std::vector<Bucket> buckets_of(const std::vector<size_t>& sizes) {
  std::vector<Bucket> v;
  size_t off = 0;
  for (size_t n : sizes) {
    Bucket b;
    b.index = v.size();
    b.offset = off;
    b.numel = n;
    v.push_back(b);
    off += n;
  }
  return v;
}

}  // namespace

TEST_CASE("shard rule: chunk = ceil(n / N), high ranks may own nothing", "[shard]") {
  CHECK(shard_chunk(10, 3) == 4);
  CHECK(shard_count(10, 3, 0) == 4);
  CHECK(shard_count(10, 3, 1) == 4);
  CHECK(shard_count(10, 3, 2) == 2);
  CHECK(shard_chunk(2, 4) == 1);  // n < N: ranks 2 and 3 own nothing
  CHECK(shard_count(2, 4, 1) == 1);
  CHECK(shard_count(2, 4, 2) == 0);
  CHECK(shard_count(2, 4, 3) == 0);
  CHECK(shard_chunk(9, 5) == 2);
  CHECK(shard_count(9, 5, 4) == 1);
  CHECK(shard_chunk(0, 3) == 0);
  CHECK(shard_count(7, 1, 0) == 7);
  CHECK_THROWS_AS(shard_chunk(5, 0), std::invalid_argument);

  // By hand: buckets of 10 and 3 elements on 3 ranks; rank 2 owns [8, 10) and [12, 13).
  const ShardPlan p(buckets_of({10, 3}), 3, 2);
  REQUIRE(p.slices().size() == 2);
  CHECK(p.slices()[0].flat_offset == 8);
  CHECK(p.slices()[0].count == 2);
  CHECK(p.slices()[0].chunk == 4);
  CHECK(p.slices()[0].slot_offset == 0);
  CHECK(p.slices()[1].flat_offset == 12);
  CHECK(p.slices()[1].count == 1);
  CHECK(p.slices()[1].chunk == 1);
  CHECK(p.slices()[1].slot_offset == 4);
  CHECK(p.numel() == 3);
  CHECK(p.slot_numel() == 5);
  CHECK(p.total() == 13);
}

TEST_CASE("shard plan: uneven buckets on 1..5 ranks are covered exactly once", "[shard]") {
  // Sizes that do not divide by 2, 3, 4 or 5, one smaller than every rank count, and 0.
  const std::vector<size_t> sizes = {1, 7, 13, 64, 97, 2, 0, 1031};
  const auto buckets = buckets_of(sizes);
  const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
  for (int n = 1; n <= 5; ++n) {
    INFO("ranks " << n);
    std::vector<int> owner(total, -1);
    size_t owned = 0, slots = 0;
    for (int r = 0; r < n; ++r) {
      const ShardPlan p(buckets, n, r);
      REQUIRE(p.world_size() == n);
      for (size_t b = 0; b < buckets.size(); ++b) {
        const ShardSlice& s = p.slices()[b];
        // Independent of the plan's arithmetic: the bucket's elements i with i / chunk == r.
        const size_t chunk = (sizes[b] + n - 1) / n;
        size_t expect = 0;
        for (size_t i = 0; i < sizes[b]; ++i) expect += chunk && i / chunk == (size_t)r;
        CHECK(s.count == expect);
        CHECK(s.chunk == chunk);
        CHECK(s.count <= s.chunk);
        for (size_t i = s.flat_offset; i < s.flat_offset + s.count; ++i) {
          REQUIRE(i >= buckets[b].offset);
          REQUIRE(i < buckets[b].offset + buckets[b].numel);
          CHECK(owner[i] == -1);  // disjoint
          owner[i] = r;
        }
        const ShardSlice other = ShardPlan(buckets, n, 0).slice_of(b, r);  // seen from another rank
        CHECK(other.flat_offset == s.flat_offset);
        CHECK(other.count == s.count);
        CHECK(other.slot_offset == s.slot_offset);
      }
      owned += p.numel();
      if (r == 0) slots = p.slot_numel();
      CHECK(p.slot_numel() == slots);  // the same on every rank
    }
    CHECK(owned == total);
    for (size_t i = 0; i < total; ++i) REQUIRE(owner[i] != -1);  // covered
    size_t chunks = 0;
    for (size_t s : sizes) chunks += (s + n - 1) / n;
    CHECK(slots == chunks);
    CHECK(slots * n >= total);
    CHECK(slots * n < total + sizes.size() * n);  // padding < N per bucket
  }
}

TEST_CASE("shard plan: take, put and assemble round-trip the flat buffer", "[shard]") {
  const auto buckets = buckets_of({5, 11, 1, 30});
  const size_t total = 47;
  std::vector<float> full(total);
  for (size_t i = 0; i < total; ++i) full[i] = 1.0f + (float)i;
  for (int n : {1, 3, 4}) {
    INFO("ranks " << n);
    std::vector<float> all, rebuilt(total, -1.0f), put_back(total, 0.0f);
    size_t slots = 0;
    for (int r = 0; r < n; ++r) {
      const ShardPlan p(buckets, n, r);
      slots = p.slot_numel();
      std::vector<float> shard(slots, 99.0f);
      p.take(full.data(), shard.data());
      for (const ShardSlice& s : p.slices()) {
        for (size_t i = 0; i < s.count; ++i) CHECK(shard[s.slot_offset + i] == full[s.flat_offset + i]);
        for (size_t i = s.count; i < s.chunk; ++i) CHECK(shard[s.slot_offset + i] == 0.0f);  // padding
      }
      p.put(shard.data(), put_back.data());
      all.insert(all.end(), shard.begin(), shard.end());
    }
    CHECK(put_back == full);  // every rank's put covers its own elements, together all of them
    ShardPlan(buckets, n, 0).assemble(all.data(), rebuilt.data());
    CHECK(rebuilt == full);
    CHECK(all.size() == slots * n);
  }
}

TEST_CASE("shard plan: vit_l_32's 25 MiB buckets on 8 ranks", "[shard]") {
  const ParamLayout L = make_param_layout(vit_config("vit_l_32"));
  const auto buckets = assign_buckets(L, 1 << 20, 25 << 20);
  size_t owned = 0;
  for (int r = 0; r < 8; ++r) owned += ShardPlan(buckets, 8, r).numel();
  CHECK(owned == L.total);
  const ShardPlan p(buckets, 8, 0);
  CHECK(p.total() == L.total);
  CHECK(p.slot_numel() >= L.total / 8);
  CHECK(p.slot_numel() < L.total / 8 + buckets.size());
}

TEST_CASE("shard plan: refuses a bad rank and buckets with gaps", "[shard]") {
  auto b = buckets_of({4, 4});
  CHECK_THROWS_AS(ShardPlan(b, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(ShardPlan(b, 0, 0), std::invalid_argument);
  b[1].offset = 5;
  CHECK_THROWS_AS(ShardPlan(b, 2, 0), std::invalid_argument);
}
