// The GPU Optimizer (src/engines/optimizer_gpu.h) against the host Optimizer (src/engines/optimizer.h) on the same
// gradients: SGD with momentum and AdamW, the device skip flag (a skipped update changes nothing
// and is not counted), the bf16 working copy written by every update, and load_state continuation.
// Over segments (ZeRO-1's chunks: compact state, pointers not 16-byte aligned) against the same
// GPU optimizer over the whole buffer, bit for bit; flag_nonfinite (cuda/kernels/sgd.h) at such pointers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "src/engines/optimizer.h"
#include "cuda/kernels/sgd.h"
#include "src/engines/optimizer_gpu.h"
#include "tests/catch.h"
#include "tests/gpu/bf16_test_util.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

using namespace vitddp;
using namespace vitddp_test;

namespace {

/// Four updates of options `o` on the GPU and host optimizers from the same parameters and
/// gradients, the second one skipped by the device flag (the host one is then not called, as the
/// CPU engine does). REQUIREs agreement within 1e-6 (norm-relative), a bitwise unchanged skipped
/// step, the bf16 copy equal to bf16(parameters) bit for bit, and a bitwise continuation after
/// load_state on a second GPU optimizer.
void check_gpu_against_host(const Options& o) {
  const size_t n = 4099;  // not a multiple of the kernels' 4 elements per thread
  std::vector<float> p = normal_vec(n, 41, 0, 0.05), hg(n);
  DevVec<float> dp(p), dg(n);
  DevVec<int> dskip(1);
  DevVec<uint16_t> dbf16(n), dbf16_twin(n);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  auto host = make_host_optimizer(o, p.data(), hg.data(), n);
  auto gpu = make_gpu_optimizer(o, n, st);
  gpu->bind(dp.get(), dg.get(), dskip.get(), reinterpret_cast<__nv_bfloat16*>(dbf16.get()));
  REQUIRE(gpu->state_names() == host->state_names());
  for (int t = 0; t < 4; ++t) {
    INFO("update " << t);
    const std::vector<float> g = normal_vec(n, 42, t);
    std::copy(g.begin(), g.end(), hg.begin());
    dg.upload(g);
    const bool skip = t == 1;
    dskip.upload(std::vector<int>{skip ? 1 : 0});
    const std::vector<float> before = dp.download();
    const double lr = 0.01 * (t + 1);
    gpu->step(lr, 0.5);
    CUDA_CHECK(cudaStreamSynchronize(st));
    gpu->end_step(!skip);
    if (!skip) host->step(lr, 0.5);
    host->end_step(!skip);
    const std::vector<float> gp = dp.download();
    if (skip) CHECK(gp == before);
    CHECK(gpu->applied_steps() == host->applied_steps());
    CHECK(norm_rel_err(gp, p) <= 1e-6);
    const std::vector<uint16_t> b = dbf16.download();
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += b[i] != bf16_bits(gp[i]);
    CHECK(wrong == 0);
  }
  CHECK(gpu->applied_steps() == 3);
  const auto gs = gpu->state(), hs = host->state();
  REQUIRE(gs.size() == hs.size());
  for (size_t k = 0; k < gs.size(); ++k) {
    CHECK(gs[k].first == hs[k].first);
    CHECK(norm_rel_err(gs[k].second, hs[k].second) <= 1e-6);
  }
  // load_state: a second GPU optimizer continues bit for bit.
  const std::vector<float> gp = dp.download();
  DevVec<float> dq(gp);
  auto twin = make_gpu_optimizer(o, n, st);
  twin->bind(dq.get(), dg.get(), dskip.get(), reinterpret_cast<__nv_bfloat16*>(dbf16_twin.get()));
  twin->load_state(TrainState{gp, gs, gpu->applied_steps()});
  dskip.upload(std::vector<int>{0});
  gpu->step(0.003, 1.0);
  twin->step(0.003, 1.0);
  CUDA_CHECK(cudaStreamSynchronize(st));
  CHECK(dq.download() == dp.download());
  CHECK(twin->state() == gpu->state());
  CHECK(dbf16_twin.download() == dbf16.download());
  CUDA_CHECK(cudaStreamDestroy(st));
}

}  // namespace

TEST_CASE("gpu optimizer: SGD with momentum and weight decay against the host optimizer, skip flag, bf16 copy",
          "[gpu][optimizer]") {
  REQUIRE_GPU();
  check_gpu_against_host(parse_args({"--lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.01"}));
}

TEST_CASE("gpu optimizer: SGD without momentum (no state) against the host optimizer", "[gpu][optimizer]") {
  REQUIRE_GPU();
  check_gpu_against_host(parse_args({"--lr", "0.1"}));
}

TEST_CASE("gpu optimizer: AdamW against the host optimizer, skip flag not counted, bf16 copy", "[gpu][optimizer]") {
  REQUIRE_GPU();
  check_gpu_against_host(parse_args({"--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.1",
                                     "--adam-beta2", "0.95"}));
}

namespace {

/// Three updates of `whole` and `part` on the same gradients (normal_vec(n, seed, t)), the second
/// skipped by the device flag, on stream `st`.
void three_updates(GpuOptimizer& whole, GpuOptimizer& part, DevVec<float>& dg, DevVec<int>& dskip, size_t n,
                   unsigned seed, cudaStream_t st) {
  for (int t = 0; t < 3; ++t) {
    dg.upload(normal_vec(n, seed, t));
    dskip.upload(std::vector<int>{t == 1 ? 1 : 0});
    whole.step(0.02, 1.0);
    part.step(0.02, 1.0);
    CUDA_CHECK(cudaStreamSynchronize(st));
    whole.end_step(t != 1);
    part.end_step(t != 1);
  }
}

/// Three updates (the second skipped by the device flag) of options `o` over `segments` of a
/// 4099-element buffer with compact state, against the whole-buffer GPU optimizer: the segments'
/// parameters, bf16 copy and state bit for bit; everything outside the segments untouched.
void check_segments_against_whole(const Options& o) {
  const size_t n = 4099;
  // Parameter offsets 1 (not 16-byte aligned) and 1500 (aligned), state offsets 0 and 1001 (not):
  // the SGD kernel's scalar path for both, the vector path for none, the same results.
  const std::vector<OptimizerSegment> segs = {{1, 1, 0, 1001}, {1500, 1500, 1001, 998}, {3000, 3000, 1999, 1099}};
  const size_t state_n = 1001 + 998 + 1099;
  const std::vector<float> p0 = normal_vec(n, 51, 0, 0.05);
  const std::vector<uint16_t> sentinel(n, 0x7fc1);  // a bf16 NaN nothing writes outside the segments
  DevVec<float> dwhole(p0), dseg(p0), dg(n);
  DevVec<int> dskip(1);
  DevVec<uint16_t> bwhole(sentinel), bseg(sentinel);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  auto whole = make_gpu_optimizer(o, n, st);
  auto part = make_gpu_optimizer(o, state_n, st);
  whole->bind(dwhole.get(), dg.get(), dskip.get(), reinterpret_cast<__nv_bfloat16*>(bwhole.get()));
  part->bind(dseg.get(), dg.get(), dskip.get(), reinterpret_cast<__nv_bfloat16*>(bseg.get()), segs);
  CHECK(part->state_numel() == state_n);
  three_updates(*whole, *part, dg, dskip, n, 52, st);
  const std::vector<float> pw = dwhole.download(), ps = dseg.download();
  const std::vector<uint16_t> bw = bwhole.download(), bs = bseg.download();
  std::vector<char> inside(n, 0);
  size_t wrong = 0, moved = 0;
  for (const OptimizerSegment& sg : segs)
    for (size_t i = 0; i < sg.count; ++i) {
      const size_t j = sg.param_offset + i;
      inside[j] = 1;
      wrong += ps[j] != pw[j] || bs[j] != bw[j];
      moved += ps[j] != p0[j];
    }
  CHECK(wrong == 0u);
  CHECK(moved > 0u);
  size_t touched = 0;
  for (size_t j = 0; j < n; ++j)
    if (!inside[j]) touched += ps[j] != p0[j] || bs[j] != sentinel[j];
  CHECK(touched == 0u);
  const auto sw = whole->state(), ss = part->state();
  REQUIRE(sw.size() == ss.size());
  for (size_t k = 0; k < sw.size(); ++k) {
    REQUIRE(ss[k].second.size() == state_n);
    size_t bad = 0;
    for (const OptimizerSegment& sg : segs)
      for (size_t i = 0; i < sg.count; ++i) bad += ss[k].second[sg.state_offset + i] != sw[k].second[sg.param_offset + i];
    CHECK(bad == 0u);
  }
  CHECK(part->applied_steps() == 2);
  CUDA_CHECK(cudaStreamDestroy(st));
}

/// ZeRO-1's bf16 all-gather layout (zero_segments(plan, MasterParams::Shard)): the parameters are
/// compact fp32 masters (param_offset into them), the gradients and the bf16 copy flat
/// (grad_offset). Three updates (the second skipped) against the whole-buffer GPU optimizer: each
/// master equals the whole update of its flat element, the bf16 copy lands at the flat place (the
/// same bits as the whole optimizer's copy), nothing else of the bf16 copy is written.
void check_compact_masters_against_whole(const Options& o) {
  const size_t n = 4099;
  const std::vector<OptimizerSegment> segs = {{0, 1, 0, 1001}, {1001, 1500, 1001, 998}, {1999, 3000, 1999, 1099}};
  const size_t m = 1001 + 998 + 1099;
  const std::vector<float> p0 = normal_vec(n, 61, 0, 0.05);
  std::vector<float> m0(m);
  for (const OptimizerSegment& sg : segs)
    for (size_t i = 0; i < sg.count; ++i) m0[sg.param_offset + i] = p0[sg.grad_offset + i];
  const std::vector<uint16_t> sentinel(n, 0x7fc1);
  DevVec<float> dwhole(p0), dmaster(m0), dg(n);
  DevVec<int> dskip(1);
  DevVec<uint16_t> bwhole(sentinel), bseg(sentinel);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  auto whole = make_gpu_optimizer(o, n, st);
  auto part = make_gpu_optimizer(o, m, st);
  whole->bind(dwhole.get(), dg.get(), dskip.get(), reinterpret_cast<__nv_bfloat16*>(bwhole.get()));
  part->bind(dmaster.get(), dg.get(), dskip.get(), reinterpret_cast<__nv_bfloat16*>(bseg.get()), segs);
  three_updates(*whole, *part, dg, dskip, n, 62, st);
  const std::vector<float> pw = dwhole.download(), pm = dmaster.download();
  const std::vector<uint16_t> bw = bwhole.download(), bs = bseg.download();
  std::vector<char> inside(n, 0);
  size_t wrong = 0, moved = 0;
  for (const OptimizerSegment& sg : segs)
    for (size_t i = 0; i < sg.count; ++i) {
      const size_t j = sg.grad_offset + i;
      inside[j] = 1;
      wrong += pm[sg.param_offset + i] != pw[j] || bs[j] != bw[j];
      moved += pm[sg.param_offset + i] != p0[j];
    }
  CHECK(wrong == 0u);
  CHECK(moved > 0u);
  size_t touched = 0;
  for (size_t j = 0; j < n; ++j)
    if (!inside[j]) touched += bs[j] != sentinel[j];
  CHECK(touched == 0u);
  CUDA_CHECK(cudaStreamDestroy(st));
}

}  // namespace

TEST_CASE("gpu optimizer over compact masters (ZeRO-1's bf16 all-gather): flat gradients and bf16 copy, the "
          "whole-buffer update bit for bit",
          "[gpu][optimizer][zero]") {
  REQUIRE_GPU();
  check_compact_masters_against_whole(parse_args({"--lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.01"}));
  check_compact_masters_against_whole(parse_args({"--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.1"}));
}

TEST_CASE("gpu optimizer over segments (ZeRO-1's chunks, unaligned): the whole-buffer update bit for bit, rest untouched",
          "[gpu][optimizer][zero]") {
  REQUIRE_GPU();
  check_segments_against_whole(parse_args({"--lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.01"}));
  check_segments_against_whole(parse_args({"--lr", "0.1"}));
  check_segments_against_whole(parse_args({"--optimizer", "adamw", "--lr", "0.01", "--weight-decay", "0.1"}));
}

TEST_CASE("flag_nonfinite: any float-aligned range, its own elements only", "[gpu][optimizer][zero]") {
  REQUIRE_GPU();
  std::vector<float> x(1031, 1.0f);
  x[0] = std::nanf("");     // before the range
  x[1030] = INFINITY;       // after it
  DevVec<float> dx(x);
  DevVec<int> flag(1);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  auto flagged = [&](size_t first, size_t count) {
    flag.upload(std::vector<int>{0});
    flag_nonfinite(dx.get() + first, count, flag.get(), st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    return flag.download()[0];
  };
  for (size_t first : {1, 2, 3, 4, 5}) CHECK(flagged(first, 1030 - first) == 0);  // finite inside
  CHECK(flagged(0, 7) == 1);
  CHECK(flagged(5, 1026) == 1);
  x[517] = -INFINITY;
  dx.upload(x);
  for (size_t first : {1, 2, 3, 4, 5}) CHECK(flagged(first, 1029 - first) == 1);
  CHECK(flagged(518, 500) == 0);
  CUDA_CHECK(cudaStreamDestroy(st));
}
