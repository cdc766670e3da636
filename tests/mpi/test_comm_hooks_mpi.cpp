// Compression comm hooks in the CPU backend's reducer under `mpirun -np 2`: averaging for every
// compression and both bucket modes, fp16 overflow, bf16 rounding per reduction step, PowerSGD
// exactness on rank-1 gradients, error feedback, start step, bytes and flags per bucket.
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "model/rng.h"
#include "mpi/hooks/half_host.h"
#include "mpi/hooks/powersgd_host.h"
#include "mpi/reducer/cpu_reducer.h"
#include "mpi/transports/host_transport.h"
#include "mpi/transports/mpi_transport.h"
#include "tests/catch.h"
#include "tests/mpi_test_util.h"

using namespace vitddp;
using vitddp_test::world_rank;
using vitddp_test::two_rank_16bit_average;
using vitddp_test::world_size;

namespace {

/// One step of the reducer: parameters reported ready in gradient-ready order, in groups of 3.
BucketTimes step(CpuReducer& r, const ParamLayout& L) {
  r.prepare_for_backward(std::chrono::steady_clock::now());
  const auto order = L.ready_order();
  for (size_t i = 0; i < order.size(); i += 3)
    r.mark_ready(std::vector<size_t>(order.begin() + i, order.begin() + std::min(order.size(), i + 3)));
  r.finalize();
  return r.times();
}

ReducerOptions options(const std::string& c, bool view, int64_t powersgd_start = 0) {
  ReducerOptions o;
  o.compression = c;
  o.grad_as_bucket_view = view;
  o.powersgd.start_iter = powersgd_start;
  return o;
}

const std::string kAll[] = {"none", "fp16", "bf16", "powersgd"};

/// Expected payload bytes and compressed flag of bucket b under compression c (past PowerSGD's start).
uint64_t expected_bytes(const std::string& c, const ParamLayout& L, const std::vector<Bucket>& B, size_t b, bool* compressed) {
  if (c == "none") {
    *compressed = false;
    return 4ull * B[b].numel;
  }
  if (c == "fp16" || c == "bf16") {
    *compressed = true;
    return 2ull * B[b].numel;
  }
  if (c == "powersgd") {
    const auto plan = make_powersgd_plan(hook_buckets(L, B)[b], 1, 2.0);
    *compressed = plan.compressed_count > 0;
    return plan.bytes_per_step();
  }
  return 0;
}

}  // namespace

TEST_CASE("every compression averages every bucket: rank r holds r+1", "[mpi][comm_hooks]") {
  REQUIRE(world_size() == 2);
  // vit_tiny: 1-D tensors (LayerNorm, biases), 2-D and 4-D weights, (1,T,D) embeddings.
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  const auto B = assign_buckets(L, 4096, 65536);
  REQUIRE(B.size() > 3);
  for (const std::string& c : kAll)
    for (bool view : {true, false}) {
      INFO(c << (view ? ", bucket view" : ", bucket copy"));
      std::vector<float> grads(L.total, (float)(world_rank() + 1));
      CpuReducer reducer(L, B, grads.data(), world_size(), options(c, view));
      const BucketTimes t = step(reducer, L);
      size_t wrong = 0;
      for (const auto& p : L.params)
        for (size_t i = p.offset; i < p.offset + p.numel; ++i)
          // fp32, fp16 and bf16 hold 0.5, 1 and 1.5 exactly; PowerSGD approximates the rank-1
          // matrix 1.5 * 1 1^T up to fp32 rounding.
          wrong += c == "powersgd" ? std::abs(grads[i] - 1.5f) > 1e-5f : grads[i] != 1.5f;
      CHECK(wrong == 0u);
      REQUIRE(t.start_ms.size() == B.size());
      REQUIRE(t.bytes_sent.size() == B.size());
      for (size_t b = 0; b < B.size(); ++b) {
        bool comp = false;
        CHECK(t.bytes_sent[b] == expected_bytes(c, L, B, b, &comp));
        CHECK(t.compressed[b] == (comp ? 1 : 0));
        CHECK(t.end_ms[b] >= t.start_ms[b]);
        CHECK(t.compress_ms[b] >= 0);
        CHECK(t.allreduce_ms[b] >= 0);
        if (view) CHECK(t.copy_ms[b] == 0);
      }
    }
}

TEST_CASE("fp16: two ranks holding 40000 give 40000, not inf (divide before the cast)", "[mpi][comm_hooks]") {
  REQUIRE(world_size() == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const auto B = assign_buckets(L, 1024, 4096);
  std::vector<float> grads(L.total, 40000.0f);  // 40000 + 40000 = 80000 > 65504 = fp16 max
  CpuReducer reducer(L, B, grads.data(), 2, options("fp16", true));
  step(reducer, L);
  for (size_t i = 0; i < L.total; ++i) REQUIRE(grads[i] == 40000.0f);
}

TEST_CASE("bf16: each reduction step adds in fp32 and rounds to bf16", "[mpi][comm_hooks]") {
  REQUIRE(world_size() == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const auto B = assign_buckets(L, 1024, 4096);
  const int r = world_rank();
  // Element 3k:   rank 0 holds 2, rank 1 holds 2^-7: bf16(1) + bf16(2^-8) = 1 + 2^-8 is a tie between
  //               1 and 1 + 2^-7 and rounds to even: 1.0 (an fp32 sum would keep 1.00390625).
  // Element 3k+1: rank 0 holds 2(1 + 0.4 2^-7), rank 1 holds 2(0.5 + 0.4 2^-8): each half rounds
  //               down (to 1 and 0.5) before the sum: 1.5, where rounding the exact average
  //               1.5 + 0.6 2^-7 would give 1.5078125.
  // Element 3k+2: random values, checked against the emulation formula.
  // (With two ranks there is a single addition, so an all-bf16 running sum and NCCL's "add in
  // fp32, round each step" cannot differ here; they could only with 3 or more ranks.)
  std::vector<float> a(L.total), b(L.total), grads(L.total);
  for (size_t i = 0; i < L.total; ++i) {
    switch (i % 3) {
      case 0: a[i] = 2.0f; b[i] = 1.0f / 128; break;
      case 1: a[i] = 2.0f * (1.0f + 0.4f / 128); b[i] = 2.0f * (0.5f + 0.4f / 256); break;
      default: a[i] = (float)rand_normal(5, 0, i); b[i] = (float)rand_normal(5, 1, i); break;
    }
    grads[i] = r == 0 ? a[i] : b[i];
  }
  CpuReducer reducer(L, B, grads.data(), 2, options("bf16", true));
  step(reducer, L);
  for (size_t i = 0; i < L.total; ++i) {
    const float want = two_rank_16bit_average("bf16", a[i], b[i]);
    INFO("element " << i);
    REQUIRE(grads[i] == want);
    if (i % 3 == 0) REQUIRE(grads[i] == 1.0f);
    if (i % 3 == 1) REQUIRE(grads[i] == 1.5f);
  }
}

TEST_CASE("PowerSGD is exact on rank-1 gradients (2 ranks)", "[mpi][powersgd]") {
  REQUIRE(world_size() == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  const auto B = assign_buckets(L, 4096, 65536);
  for (bool same_u : {true, false}) {
    INFO((same_u ? "u v^T on both ranks" : "u_r v^T: rank-dependent u, same v"));
    // Every tensor viewed (n, m) holds u v^T: M Q = u (v.Q) spans u, and the sum over ranks of
    // u_r v^T is rank 1 too, so P Q^T reproduces the average exactly (up to fp32 rounding).
    std::vector<float> grads(L.total, 0.0f), want(L.total, 0.0f);
    const int r = world_rank();
    for (const auto& p : L.params) {
      const size_t n = (size_t)p.shape[0], m = p.numel / n;
      for (size_t i = 0; i < n; ++i)
        for (size_t k = 0; k < m; ++k) {
          const double u = 0.5 + 0.01 * (double)((i * 7) % 13), v = std::cos(0.3 * (double)k);
          const double u0 = u, u1 = same_u ? u : 0.5 * u + 0.02 * (double)(i % 3);
          grads[p.offset + i * m + k] = (float)((r == 0 ? u0 : u1) * v);
          want[p.offset + i * m + k] = (float)(0.5 * (u0 + u1) * v);
        }
    }
    CpuReducer reducer(L, B, grads.data(), 2, options("powersgd", true, 0));
    const BucketTimes t = step(reducer, L);
    double worst = 0;
    for (const auto& p : L.params)
      for (size_t i = p.offset; i < p.offset + p.numel; ++i)
        worst = std::max(worst, std::abs((double)grads[i] - want[i]) / std::max(1.0, std::abs((double)want[i])));
    CHECK(worst <= 1e-5);
    for (size_t b = 0; b < B.size(); ++b) CHECK(t.compressed[b] == 1);  // every vit_tiny bucket holds a matrix
  }
}

TEST_CASE("PowerSGD error feedback carries exactly the residual (reducer, 2 ranks)", "[mpi][powersgd]") {
  REQUIRE(world_size() == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  const auto B = assign_buckets(L, 4096, 65536);
  std::vector<float> grads(L.total, 0.0f);
  CpuReducer reducer(L, B, grads.data(), 2, options("powersgd", true, 0));
  std::vector<std::vector<float>> old_error(B.size());
  for (size_t b = 0; b < B.size(); ++b) old_error[b].assign(B[b].numel, 0.0f);
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < L.total; ++i) grads[i] = (float)rand_normal(21 + world_rank(), s, i);
    const std::vector<float> in = grads;
    step(reducer, L);
    for (size_t b = 0; b < B.size(); ++b) {
      const auto& err = reducer.powersgd()->error(b);
      REQUIRE(err.size() == B[b].numel);
      double worst = 0;
      for (size_t k = 0; k < B[b].numel; ++k) {
        const size_t i = B[b].offset + k;
        const double before = (double)in[i] + old_error[b][k];
        worst = std::max(worst, std::abs(err[k] - (before - grads[i])) / std::max(1.0, std::abs(before)));
      }
      INFO("step " << s << ", bucket " << b);
      CHECK(worst <= 1e-6);
      old_error[b] = err;
    }
    CHECK(reducer.powersgd()->iteration() == s + 1);
  }
}

TEST_CASE("PowerSGD runs plain all-reduces before its start step", "[mpi][powersgd]") {
  REQUIRE(world_size() == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  const auto B = assign_buckets(L, 4096, 65536);
  std::vector<float> grads(L.total);
  CpuReducer reducer(L, B, grads.data(), 2, options("powersgd", true, 2));
  for (int s = 0; s < 4; ++s) {
    INFO("step " << s);
    CHECK(reducer.powersgd()->iteration() == s);
    std::fill(grads.begin(), grads.end(), (float)(world_rank() + 1));
    const BucketTimes t = step(reducer, L);
    CHECK(reducer.powersgd()->iteration() == s + 1);  // once per step, after the last bucket
    for (size_t b = 0; b < B.size(); ++b) {
      bool comp = false;
      const uint64_t psgd = expected_bytes("powersgd", L, B, b, &comp);
      CHECK(t.compressed[b] == (s >= 2 ? 1 : 0));
      CHECK(t.bytes_sent[b] == (s >= 2 ? psgd : 4ull * B[b].numel));
      if (s < 2) CHECK(reducer.powersgd()->error(b).empty());
    }
    if (s < 2)
      for (size_t i = 0; i < L.total; ++i) REQUIRE(grads[i] == 1.5f);
  }
}

TEST_CASE("bucket copy mode gives the same gradients as bucket view mode (CPU)", "[mpi][comm_hooks]") {
  REQUIRE(world_size() == 2);
  const ParamLayout L = make_param_layout(vit_config("vit_tiny"));
  const auto B = assign_buckets(L, 4096, 65536);
  for (const std::string& c : kAll) {
    INFO(c);
    std::vector<float> gv(L.total), gc(L.total);
    CpuReducer view(L, B, gv.data(), 2, options(c, true, 1));
    CpuReducer copy(L, B, gc.data(), 2, options(c, false, 1));
    for (int s = 0; s < 3; ++s) {
      for (size_t i = 0; i < L.total; ++i) gv[i] = gc[i] = (float)rand_normal(31 + world_rank(), s, i);
      step(view, L);
      const BucketTimes t = step(copy, L);
      size_t diff = 0;
      for (size_t i = 0; i < L.total; ++i) diff += gv[i] != gc[i];
      CHECK(diff == 0u);
      for (size_t b = 0; b < B.size(); ++b) CHECK(t.copy_ms[b] >= 0);
    }
  }
}

TEST_CASE("MPI 16-bit sum ops add in fp32 and round", "[mpi][comm_hooks]") {
  REQUIRE(world_size() == 2);
  Mpi16BitSumOps ops;
  std::vector<uint16_t> h(4);
  const float mine[4] = {20000.0f, 1.0f, -2.5f, 0.125f};
  for (int i = 0; i < 4; ++i) h[i] = float_to_fp16(world_rank() == 0 ? mine[i] : 2 * mine[i]);
  MPI_Allreduce(MPI_IN_PLACE, h.data(), 4, MPI_UINT16_T, ops.op(DType::F16), MPI_COMM_WORLD);
  CHECK(fp16_to_float(h[0]) == 60000.0f);
  CHECK(fp16_to_float(h[1]) == 3.0f);
  CHECK(fp16_to_float(h[2]) == -7.5f);
  CHECK(fp16_to_float(h[3]) == 0.375f);
  CHECK_THROWS_AS(ops.op(DType::F32), std::invalid_argument);
}

TEST_CASE("host transport registry: every name constructs and sums", "[mpi][comm_hooks]") {
  REQUIRE(world_size() == 2);
  for (const HostTransportEntry& e : host_transport_registry()) {
    INFO(e.name);
    const std::unique_ptr<HostTransport> t = make_host_transport(e.name);
    CHECK(std::string(t->name()) == e.name);
    CHECK(t->world_size() == 2);
    // fp32: rank r holds r + 1 and r + 0.25; the sums are 3 and 1.5.
    std::vector<float> x = {(float)(world_rank() + 1), (float)world_rank() + 0.25f};
    t->start_sum(x.data(), x.size(), DType::F32)->wait();
    CHECK(x == std::vector<float>{3.0f, 1.5f});
    // bf16 bits, blocking: 1 + 2 = 3 exactly.
    uint16_t h = float_to_bf16((float)(world_rank() + 1));
    t->sum(&h, 1, DType::BF16);
    CHECK(bf16_to_float(h) == 3.0f);
  }
}
