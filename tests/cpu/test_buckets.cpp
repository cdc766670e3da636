// Bucket assignment (PyTorch DDP semantics) on the real vit_l_32 parameter table.
#include <fstream>
#include <map>
#include <sstream>

#include "model/param_layout.h"
#include "mpi/buckets/buckets.h"
#include "tests/catch.h"

using namespace vitddp;

namespace {
const size_t MiB = 1048576;

std::vector<std::string> names_of(const ParamLayout& L, const Bucket& b) {
  std::vector<std::string> n;
  for (size_t p : b.params) n.push_back(L.params[p].name);
  return n;
}
}  // namespace

TEST_CASE("vit_l_32 parameter table matches torchvision", "[buckets]") {
  const ParamLayout L = make_param_layout(vit_config("vit_l_32"));
  CHECK(L.parameter_count() == 306535400u);  // torchvision vit_l_32's parameter count
  CHECK(L.total == L.parameter_count());     // no padding for the real model
  CHECK(L.params.size() == 4 + 24 * 12 + 4);
  CHECK(L.params.front().name == "class_token");
  CHECK(L.params.back().name == "heads.head.bias");
  CHECK(L.params.back().offset == 0);  // gradient-ready order: the head is first in memory
  const ParamInfo& qkv = L.params[L.index_of("encoder.layers.encoder_layer_3.self_attention.in_proj_weight")];
  CHECK(qkv.shape == std::vector<int64_t>{3072, 1024});
}

TEST_CASE("vit_l_32 buckets at 25 MiB follow DDP's assignment", "[buckets]") {
  const ParamLayout L = make_param_layout(vit_config("vit_l_32"));
  const auto B = assign_buckets(L, 1 * MiB, 25 * MiB);
  // Hand-computed from the torchvision shapes, walking parameters in reverse registration order:
  // bucket 0 closes at the first tensor that brings it to >= 1 MiB (head weight, 4,096,000 B).
  REQUIRE(B.size() >= 3);
  CHECK(names_of(L, B[0]) == std::vector<std::string>{"heads.head.bias", "heads.head.weight"});
  CHECK(B[0].bytes() == 4000u + 4096000u);
  // bucket 1: final LN (2 x 4 KiB), block 23 mlp.3 (bias 4 KiB, weight 16 MiB), mlp.0 (bias 16 KiB,
  // weight 16 MiB) -> 33,583,104 B >= 25 MiB after mlp.0.weight.
  CHECK(B[1].params.size() == 6u);
  CHECK(B[1].bytes() == 33583104u);
  CHECK(L.params[B[1].params.back()].name == "encoder.layers.encoder_layer_23.mlp.0.weight");
  // bucket 2: the rest of block 23 (ln_2, out_proj, in_proj, ln_1: 8 tensors) + block 22 mlp.3
  // bias and weight -> 33,591,296 B.
  CHECK(B[2].params.size() == 10u);
  CHECK(B[2].bytes() == 33591296u);
  CHECK(L.params[B[2].params.back()].name == "encoder.layers.encoder_layer_22.mlp.3.weight");
  // Contiguous, complete, in order.
  size_t off = 0, tensors = 0;
  for (size_t i = 0; i < B.size(); ++i) {
    CHECK(B[i].index == i);
    CHECK(B[i].offset == off);
    off += B[i].numel;
    tensors += B[i].params.size();
  }
  CHECK(off == L.total);
  CHECK(tensors == L.params.size());
  CHECK(L.params[B.back().params.back()].name == "class_token");
}

TEST_CASE("vit_l_32 buckets match PyTorch's _compute_bucket_assignment_by_size", "[buckets]") {
  // Reference written by tests/reference/ddp_buckets.py with torch on the GPU machine:
  // one line per bucket: "<cap_mb> <bucket index> <number of tensors> <bytes>".
  std::ifstream f(std::string(VITDDP_TEST_DATA) + "/ddp_buckets_vit_l_32.txt");
  REQUIRE(f.good());
  const ParamLayout L = make_param_layout(vit_config("vit_l_32"));
  std::string line;
  int rows = 0;
  std::map<double, std::vector<Bucket>> cache;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    double cap = 0;
    size_t idx = 0, n = 0, bytes = 0;
    s >> cap >> idx >> n >> bytes;
    if (!cache.count(cap)) cache[cap] = assign_buckets(L, 1 * MiB, (size_t)(cap * MiB));
    const auto& B = cache[cap];
    INFO("cap " << cap << " MiB, bucket " << idx);
    REQUIRE(idx < B.size());
    CHECK(B[idx].params.size() == n);
    CHECK(B[idx].bytes() == bytes);
    ++rows;
  }
  for (const auto& [cap, B] : cache) {
    int expected = 0;
    std::ifstream g(std::string(VITDDP_TEST_DATA) + "/ddp_buckets_vit_l_32.txt");
    while (std::getline(g, line))
      if (!line.empty() && line[0] != '#' && std::stod(line) == cap) ++expected;
    INFO("cap " << cap);
    CHECK((int)B.size() == expected);
  }
  CHECK(rows > 10);
}

TEST_CASE("bucket tracker launches strictly in order", "[buckets]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const auto B = assign_buckets(L, 64, 256);
  REQUIRE(B.size() >= 3);
  BucketTracker t(L, B);
  // Completing bucket 1 first launches nothing; completing bucket 0 then launches 0 and 1.
  CHECK(t.mark_ready(B[1].params).empty());
  CHECK(t.mark_ready(B[0].params) == std::vector<size_t>{0, 1});
  CHECK_THROWS_AS(t.mark_ready({B[0].params[0]}), std::logic_error);
  const auto rest = t.take_remaining();
  CHECK(rest.size() == B.size() - 2);
  t.reset();
  CHECK(t.launched() == 0u);
  CHECK(bucket_fingerprint(B) != bucket_fingerprint(assign_buckets(L, 64, 512)));
}

TEST_CASE("bucket_ranges: each bucket's ranges cover exactly its chosen tensors (and the padding between them)",
          "[buckets]") {
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const std::vector<Bucket> buckets = assign_buckets(L, 64, 2048);
  REQUIRE(buckets.size() > 3);
  std::vector<size_t> chosen;
  for (size_t i = 0; i < L.params.size(); i += 1 + i % 3) chosen.push_back(i);  // an irregular subset
  const auto ranges = bucket_ranges(L, buckets, chosen);
  REQUIRE(ranges.size() == buckets.size());
  // Per element of the flat buffer: 1 chosen tensor, 2 other tensor, 0 padding.
  std::vector<int> kind(L.total, 0);
  std::vector<char> is_chosen(L.params.size(), 0);
  for (size_t i : chosen) is_chosen[i] = 1;
  for (size_t i = 0; i < L.params.size(); ++i)
    for (size_t e = 0; e < L.params[i].numel; ++e) kind[L.params[i].offset + e] = is_chosen[i] ? 1 : 2;
  std::vector<int> covered(L.total, 0);
  size_t merged = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    size_t end = 0;
    for (const FlatRange& r : ranges[b]) {
      CHECK(r.offset >= buckets[b].offset);
      CHECK(r.offset + r.count <= buckets[b].offset + buckets[b].numel);
      CHECK(r.offset >= end);  // offset order, disjoint
      end = r.offset + r.count;
      CHECK(kind[r.offset] == 1);
      CHECK(kind[end - 1] == 1);
      for (size_t e = r.offset; e < end; ++e) ++covered[e];
    }
    merged += ranges[b].size();
  }
  for (size_t e = 0; e < L.total; ++e) {
    if (kind[e] == 1) CHECK(covered[e] == 1);
    if (kind[e] == 2) CHECK(covered[e] == 0);
  }
  CHECK(merged < chosen.size());  // neighbours were merged
  CHECK_THROWS_AS(bucket_ranges(L, buckets, {L.params.size()}), std::out_of_range);
}
