// The device-memory estimate (src/engines/memory_estimate.h, --dry-run) and the activation-arena plan it
// shares with GpuViT (cuda/model/gpu_vit_arena.h): hand-computed sizes, a consistent layout, and the
// out-of-memory message.
#include <algorithm>
#include <map>

#include "cuda/kernels/attention_gemm.h"
#include "cuda/model/gpu_vit.h"
#include "cuda/kernels/gelu.h"
#include "cuda/model/gpu_vit_arena.h"
#include "cuda/kernels/layernorm.h"
#include "cuda/kernels/reduce.h"
#include "mpi/hooks/powersgd_gpu.h"
#include "mpi/reducer/gpu_reducer_gpu.h"
#include "mpi/transports/copy_engine_allreduce_gpu.h"
#include "src/engines/gpu_model_options.h"
#include "src/engines/memory_estimate.h"
#include "tests/test_util.h"

using namespace vitddp;
using vitddp_test::parse_args;

namespace {

/// Bytes of every activation buffer of GpuViT written out from the shapes in cuda/model/gpu_vit.cu
/// (without the alignment padding), for an independent check of the plan; custom attention. Its
/// tensor-core kernels (T <= 64, head_dim 64, bf16 or tf32: op 2, or `tf32`) keep [B, H, T, 2] row
/// statistics per block, the others [B, H, T, T] probabilities; the score-gradient scratch
/// [B, H, T, T] exists only beyond T 64 or head_dim 64. recompute_gelu: one [N, M] GELU output
/// for all blocks instead of one per block.
size_t hand_activation_bytes(const ViTConfig& c, size_t B, size_t op, size_t param_total, size_t reduce_floats,
                             bool tf32 = false, bool recompute_gelu = false) {
  const size_t T = c.seq_len(), D = c.hidden, M = c.mlp_dim, H = c.heads, K = c.num_classes, Np = c.num_patches(),
               PD = c.patch_dim(), L = c.layers, N = B * T, dh = D / H;
  const bool tensor_cores = (op == 2 || tf32) && T <= 64 && dh == 64;
  const size_t saved = tensor_cores ? B * H * T * 2 : B * H * T * T, dscores = T > 64 || dh > 64 ? B * H * T * T : 0;
  size_t f32 = B * Np * D + (L + 1) * N * D + L * (4 * N + saved + N * D) + B * D + 2 * B + 2 * B * K + N * D +
               dscores + B * D + reduce_floats;
  size_t ops = B * Np * PD + L * (6 * N * D + (recompute_gelu ? 1 : 2) * N * M) + N * std::max(M, 3 * D) + N * D +
               B * Np * D + (recompute_gelu ? N * M : 0);
  size_t bytes = f32 * 4 + ops * op;
  if (op == 2) bytes += param_total * 2 + N * D * 2;  // bf16 weight copy, bf16 copy of dx
  return bytes;
}

}  // namespace

TEST_CASE("memory estimate: vit_l_32, batch 32, fp32 by hand", "[memory]") {
  const Options o = parse_args({"--model", "vit_l_32", "--batch-size", "32"});
  const MemoryEstimate e = estimate_gpu_memory(o);
  CHECK(e.parameter_count == 306535400u);
  CHECK(e.bytes_of("parameters") == 306535400ull * 4);  // 1,226,141,600 bytes
  CHECK(e.bytes_of("gradients") == 0);  // overlaid on dead activations inside the arena (no accumulation)
  CHECK(e.bytes_of("optimizer state") == 0);
  CHECK(e.bytes_of("inputs") == 2 * (32ull * 3 * 224 * 224 * 4 + 32 * 4) + 4 + 4);
  CHECK(e.bytes_of("cuBLASLt workspace") == 32ull << 20);
  CHECK(e.bytes_of("reducer") == 0);  // in-place all-reduce of the gradients

  // fp32: --recompute-gelu auto recomputes the GELU outputs (one [N, M] buffer for all blocks).
  const ViTConfig c = vit_config("vit_l_32");
  const auto custom = AttentionImpl::custom;
  const auto gemm = PatchEmbedImpl::gemm;
  const GpuViTArenaPlan overlaid = plan_gpu_vit_arena(c, 306535400, 32, Precision::fp32, true, custom, gemm, true);
  CHECK(e.bytes_of("activations") == overlaid.total_bytes);
  const GpuViTArenaPlan plan = plan_gpu_vit_arena(c, 306535400, 32, Precision::fp32, false, custom, gemm, true);
  // The overlay costs far less than separate gradients (1.23 GB): block 23 starts above its own
  // gradients (and the head's), the other blocks each above the next block's gradients.
  CHECK(overlaid.total_bytes > plan.total_bytes);
  CHECK(overlaid.total_bytes - plan.total_bytes < 100000000ull);
  CHECK(overlaid.gradients != GpuViTArenaPlan::npos);
  CHECK(plan.gradients == GpuViTArenaPlan::npos);
  size_t slots = 0;
  for (const auto& s : plan.slots) slots += s.bytes;
  CHECK(slots == hand_activation_bytes(c, 32, 4, 306535400, plan.reduce_scratch_floats, false, true));
  CHECK(plan.total_bytes - slots < kArenaAlign * plan.slots.size());  // only alignment padding
  // Keeping every block's GELU output instead: 23 more [N, M] fp32 buffers (0.6 GB).
  const GpuViTArenaPlan kept = plan_gpu_vit_arena(c, 306535400, 32, Precision::fp32);
  size_t kept_slots = 0;
  for (const auto& s : kept.slots) kept_slots += s.bytes;
  CHECK(kept_slots == hand_activation_bytes(c, 32, 4, 306535400, kept.reduce_scratch_floats));
  CHECK(kept_slots - slots == 23ull * 32 * 50 * 4096 * 4);
  // About 2.0 GiB of activations (2.6 keeping the GELU outputs).
  CHECK(plan.total_bytes / 1073741824.0 == Approx(2.0).margin(0.1));
  CHECK(kept.total_bytes / 1073741824.0 == Approx(2.6).margin(0.1));
  // cuBLASLt autotuning times candidates on each GEMM's own output: nothing extra without
  // gradient accumulation.
  CHECK(e.transient.bytes == 0);
  CHECK(e.persistent_bytes() == 1226141600ull + e.bytes_of("inputs") + (32ull << 20) + overlaid.total_bytes);
  // With gradient accumulation the gradients must outlive the next forward: separate buffer.
  const MemoryEstimate acc = estimate_gpu_memory(parse_args({"--model", "vit_l_32", "--batch-size", "16",
                                                             "--grad-accum-steps", "2"}));
  CHECK(acc.bytes_of("gradients") == 306535400ull * 4);
  // The weight gradients accumulate in place (C = D): their tuning writes a temporary output, the
  // largest being fc1's / fc2's [4096, 1024] fp32.
  CHECK(acc.transient.bytes == 4096ull * 1024 * 4);
  CHECK(acc.transient.what == "cuBLASLt autotuning");
  CHECK(acc.bytes_of("activations") == plan_gpu_vit_arena(c, 306535400, 16, Precision::fp32, false, custom, gemm, true).total_bytes);
  CHECK(e.peak_bytes() == e.persistent_bytes() + e.transient.bytes);
}

TEST_CASE("memory estimate: momentum, bf16, reducer buffers", "[memory]") {
  const Options o = parse_args({"--model", "vit_b_32", "--batch-size", "8", "--precision", "bf16", "--momentum", "0.9",
                                "--grad-as-bucket-view", "off", "--compression", "fp16"});
  const ParamLayout layout = make_param_layout(vit_config("vit_b_32"));
  const std::vector<Bucket> buckets = assign_buckets(layout, 1 << 20, 25 << 20);
  const MemoryEstimate e = estimate_gpu_memory(o, layout, buckets);
  const size_t n = layout.total;
  CHECK(e.bytes_of("optimizer state") == n * 4);
  size_t largest = 0;
  for (const auto& b : buckets) largest = std::max(largest, b.numel);
  CHECK(e.bytes_of("reducer") == n * 4 + largest * 2);  // bucket buffer + 16-bit staging
  const GpuViTArenaPlan plan = plan_gpu_vit_arena(layout.cfg, n, 8, Precision::bf16);
  CHECK(plan.weights16_bytes == n * 2);
  size_t slots = 0;
  for (const auto& s : plan.slots) slots += s.bytes;
  CHECK(slots == hand_activation_bytes(layout.cfg, 8, 2, n, plan.reduce_scratch_floats));
  // tf32 at the same shape runs the same tensor-core kernels (row statistics, no score-gradient
  // scratch); fp32 keeps [B, H, T, T] probabilities but also needs no scratch (T <= 64, head_dim 64).
  for (const Precision p : {Precision::tf32, Precision::fp32}) {
    const GpuViTArenaPlan pf = plan_gpu_vit_arena(layout.cfg, n, 8, p);
    size_t pf_slots = 0;
    for (const auto& s : pf.slots) pf_slots += s.bytes;
    CHECK(pf_slots == hand_activation_bytes(layout.cfg, 8, 4, n, pf.reduce_scratch_floats, p == Precision::tf32));
    CHECK(pf.dscores == GpuViTArenaPlan::npos);
  }
  // bf16, vit_b_32 (T = 50, head_dim 64): --attention auto resolves to the tensor-core custom kernels,
  // which keep two floats per query row (max, 1 / sum); cuDNN's fused attention keeps one (log-sum-exp).
  CHECK(e.bytes_of("activations") ==
        plan_gpu_vit_arena(layout.cfg, n, 8, Precision::bf16, true, AttentionImpl::custom).total_bytes);
  Options oc = o;
  oc.attention = AttentionChoice::Cudnn;
  const MemoryEstimate ec = estimate_gpu_memory(oc, layout, buckets);
  CHECK(ec.bytes_of("activations") ==
        plan_gpu_vit_arena(layout.cfg, n, 8, Precision::bf16, true, AttentionImpl::cudnn).total_bytes);
  CHECK(ec.bytes_of("activations") < e.bytes_of("activations"));
  // fp32 attention as batched GEMMs: probabilities [B, H, T, ldp] (rows padded to 4 floats) in every
  // block, or (gemm-recompute) in one buffer for all blocks and none per block; the rest identical.
  {
    const ParamLayout l16 = make_param_layout(vit_config("vit_b_16"));
    const size_t B = 8, T = 197, H = 12, ldp = 200, probs = B * H * T * ldp * 4;
    CHECK(GemmAttention::probs_ld(197) == 200);
    CHECK(GemmAttention::probs_ld(200) == 200);
    CHECK(GemmAttention::probs_ld(1) == 4);
    const GpuViTArenaPlan keep = plan_gpu_vit_arena(l16.cfg, l16.total, 8, Precision::tf32, false, AttentionImpl::gemm);
    const GpuViTArenaPlan re =
        plan_gpu_vit_arena(l16.cfg, l16.total, 8, Precision::tf32, false, AttentionImpl::gemm_recompute);
    REQUIRE(re.attn_probs != GpuViTArenaPlan::npos);
    CHECK(keep.attn_probs == GpuViTArenaPlan::npos);
    for (const auto& b : re.blocks) CHECK(b.probs == GpuViTArenaPlan::npos);
    size_t keep_probs = 0, re_probs = 0, keep_all = 0, re_all = 0;
    for (const auto& s : keep.slots) {
      keep_all += s.bytes;
      if (s.name.rfind("attention probabilities", 0) == 0) keep_probs += s.bytes;
    }
    for (const auto& s : re.slots) {
      re_all += s.bytes;
      if (s.name.rfind("attention probabilities", 0) == 0) re_probs += s.bytes;
    }
    CHECK(keep_probs == 12 * probs);
    CHECK(re_probs == probs);
    CHECK(keep_all - re_all == 11 * probs);
    Options og = parse_args({"--model", "vit_b_16", "--precision", "tf32", "--batch-size", "8", "--attention", "gemm"});
    Options orc = og;
    orc.attention = AttentionChoice::GemmRecompute;
    const std::vector<Bucket> b16 = assign_buckets(l16, 1 << 20, 25 << 20);
    // (tf32: --recompute-gelu auto is on)
    const auto pe = PatchEmbedImpl::gemm;
    CHECK(estimate_gpu_memory(og, l16, b16).bytes_of("activations") ==
          plan_gpu_vit_arena(l16.cfg, l16.total, 8, Precision::tf32, true, AttentionImpl::gemm, pe, true).total_bytes);
    CHECK(estimate_gpu_memory(orc, l16, b16).bytes_of("activations") ==
          plan_gpu_vit_arena(l16.cfg, l16.total, 8, Precision::tf32, true, AttentionImpl::gemm_recompute, pe, true).total_bytes);
    Options off = og;
    off.recompute_gelu = RecomputeChoice::Off;
    CHECK(estimate_gpu_memory(off, l16, b16).bytes_of("activations") ==
          plan_gpu_vit_arena(l16.cfg, l16.total, 8, Precision::tf32, true, AttentionImpl::gemm).total_bytes);
  }

  Options nd = parse_args({"--model", "vit_b_32", "--no-ddp"});
  nd.grad_as_bucket_view = false;  // (refused on the command line with --no-ddp: no effect)
  CHECK(estimate_gpu_memory(nd, layout, buckets).bytes_of("reducer") == 0);  // no reducer at all

  Options ps = parse_args({"--model", "vit_b_32", "--compression", "powersgd"});
  const size_t powersgd = PowerSgdGpu::planned_device_bytes(hook_buckets(layout, buckets), reducer_options(ps).powersgd);
  CHECK(powersgd > 0);
  CHECK(estimate_gpu_memory(ps, layout, buckets).bytes_of("reducer") == powersgd);
  ps.powersgd_error_feedback = false;  // no error buffers, no input copy
  CHECK(PowerSgdGpu::planned_device_bytes(hook_buckets(layout, buckets), reducer_options(ps).powersgd) < powersgd);

  // --allreduce copy-engine: per bucket, (n-1) scratch slots of a bucket's n-th part (256-byte
  // rounded, plus 512 bytes of slack); flags: per bucket and rank 3 (scattered, gathered, free),
  // per rank 3 more (non-finite exchange, max exchange, its free flag) and two value slots
  // (non-finite, max); nothing on one rank.
  const Options ce = parse_args({"--model", "vit_b_32", "--allreduce", "copy-engine"});
  CHECK(estimate_gpu_memory(ce, layout, buckets, 1).bytes_of("reducer") == 0);
  size_t scratch = 0;
  for (const auto& b : buckets) scratch += ((b.bytes() + 1) / 2 + 255) / 256 * 256 + 512;
  const size_t flags = ((3 * buckets.size() + 3) * 2 + 2 * 2) * 4;
  CHECK(estimate_gpu_memory(ce, layout, buckets, 2).bytes_of("reducer") == scratch + flags);
  // ZeRO-1 over the copy engines: the same scratch and flags (no padded bucket).
  const Options cez = parse_args({"--model", "vit_b_32", "--allreduce", "copy-engine", "--shard-optimizer"});
  const MemoryEstimate ez = estimate_gpu_memory(cez, layout, buckets, 2);
  CHECK(ez.bytes_of("reducer") == scratch + flags);
  std::vector<size_t> bucket_bytes;
  for (const auto& b : buckets) bucket_bytes.push_back(b.bytes());
  CHECK(ez.bytes_of("reducer") == CopyEngineAllReduce::planned_device_bytes(bucket_bytes, 2));
  CHECK(scratch > n * 4 / 2);  // about half the gradients
  CHECK(scratch < n * 4 / 2 + buckets.size() * 768);
  // With bf16 compression, a 16-bit staging buffer of the largest bucket per comm stream.
  for (const char* k : {"1", "3"}) {
    INFO("--comm-streams " << k);
    const Options c16 = parse_args({"--model", "vit_b_32", "--allreduce", "copy-engine", "--compression", "bf16",
                                    "--comm-streams", k});
    CHECK(estimate_gpu_memory(c16, layout, buckets, 2).bytes_of("reducer") ==
          scratch + flags + (size_t)std::stoi(k) * largest * 2);
  }
}

namespace {
struct ArenaCase {
  Precision p;
  AttentionImpl attention;
  bool recompute_gelu;
};
const ArenaCase kArenaCases[] = {{Precision::fp32, AttentionImpl::custom, false},
                                 {Precision::bf16, AttentionImpl::custom, false},
                                 {Precision::tf32, AttentionImpl::gemm_recompute, false},
                                 {Precision::fp32, AttentionImpl::custom, true},
                                 {Precision::bf16, AttentionImpl::custom, true},
                                 {Precision::tf32, AttentionImpl::gemm_recompute, true}};
}  // namespace

TEST_CASE("activation arena: aligned, disjoint buffers; every pointer GpuViT binds is a slot", "[memory]") {
  for (const auto& [p, attention, recompute_gelu] : kArenaCases) {
    INFO(precision_name(p) << " " << attention_impl_name(attention) << (recompute_gelu ? ", GELU recomputed" : ""));
    const ViTConfig c = vit_config("vit_tiny");
    const size_t total = make_param_layout(c).total;
    const GpuViTArenaPlan plan = plan_gpu_vit_arena(c, total, 5, p, false, attention, PatchEmbedImpl::gemm, recompute_gelu);
    std::map<size_t, size_t> slot_at;  // offset -> bytes
    size_t end = 0;
    for (const auto& s : plan.slots) {
      CHECK(s.offset % kArenaAlign == 0);
      CHECK(s.offset >= end);  // in order, no overlap
      end = s.offset + s.bytes;
      slot_at[s.offset] = s.bytes;
    }
    CHECK(end == plan.total_bytes);
    std::vector<size_t> bound = {plan.emb,  plan.xf,           plan.meanf,   plan.rstdf, plan.logits,  plan.dlogits,
                                 plan.dx,   plan.reduce_scratch, plan.patches, plan.dwide, plan.dnarrow, plan.demb,
                                 plan.dxf};
    // Custom attention at vit_tiny's T 17, head_dim 16 keeps dS in shared memory: no scratch slot.
    if (attention == AttentionImpl::custom) CHECK(plan.dscores == GpuViTArenaPlan::npos);
    else bound.push_back(plan.dscores);
    for (size_t x : plan.x) bound.push_back(x);
    for (const auto& b : plan.blocks)
      for (size_t off : {b.y1, b.qkv, b.attn, b.z, b.u, b.g, b.mean1, b.rstd1, b.probs, b.xmid, b.mean2, b.rstd2})
        if (off != GpuViTArenaPlan::npos) bound.push_back(off);
    if (attention == AttentionImpl::gemm_recompute) {
      for (const auto& b : plan.blocks) CHECK(b.probs == GpuViTArenaPlan::npos);
      REQUIRE(plan.attn_probs != GpuViTArenaPlan::npos);
      bound.push_back(plan.attn_probs);
    } else {
      CHECK(plan.attn_probs == GpuViTArenaPlan::npos);
    }
    if (recompute_gelu) {
      for (const auto& b : plan.blocks) CHECK(b.g == GpuViTArenaPlan::npos);
      REQUIRE(plan.gelu_out != GpuViTArenaPlan::npos);
      CHECK(slot_at[plan.gelu_out] == 5 * 17 * (size_t)c.mlp_dim * dtype_bytes(operand_dtype(p)));
      bound.push_back(plan.gelu_out);
    } else {
      CHECK(plan.gelu_out == GpuViTArenaPlan::npos);
    }
    if (p == Precision::bf16) {
      bound.push_back(plan.weights16);
      bound.push_back(plan.dx16);
    } else {
      CHECK(plan.weights16 == GpuViTArenaPlan::npos);
      CHECK(plan.dx16 == GpuViTArenaPlan::npos);
    }
    CHECK(bound.size() == plan.slots.size());
    std::sort(bound.begin(), bound.end());
    CHECK(std::adjacent_find(bound.begin(), bound.end()) == bound.end());  // each slot bound once
    for (size_t off : bound) CHECK(slot_at.count(off) == 1);
    CHECK(plan.x.size() == (size_t)c.layers + 1);
  }
  CHECK_THROWS(plan_gpu_vit_arena(vit_config("vit_tiny"), 10, 0, Precision::fp32));
  // The overlay: block m's buffers never share memory with the gradients of blocks m..L-1 (nor
  // the head's), which backward writes while block m is still to be read.
  for (const auto& [p, attention, recompute_gelu] : kArenaCases) {
    INFO(precision_name(p) << " " << attention_impl_name(attention) << (recompute_gelu ? ", GELU recomputed" : ""));
    const ParamLayout layout = make_param_layout(vit_config("vit_b_32"));
    const GpuViTArenaPlan plan =
        plan_gpu_vit_arena(layout.cfg, layout.total, 8, p, true, attention, PatchEmbedImpl::gemm, recompute_gelu);
    REQUIRE(plan.gradients != GpuViTArenaPlan::npos);
    const int L = layout.cfg.layers;
    for (int m = 0; m < L; ++m) {
      size_t grad_end = 0;  // bytes from plan.gradients: end of the gradients of blocks m..L-1
      for (size_t i = 4 + 12 * (size_t)m; i < 4 + 12 * (size_t)(m + 1); ++i)
        grad_end = std::max(grad_end, (layout.params[i].offset + layout.params[i].numel) * 4);
      const size_t lo = plan.x[m];
      const auto& b = plan.blocks[m];
      for (size_t off : {b.y1, b.qkv, b.attn, b.z, b.u, b.g, b.mean1, b.rstd1, b.probs, b.xmid, b.mean2, b.rstd2, lo}) {
        if (off == GpuViTArenaPlan::npos) continue;  // gemm_recompute's probabilities, recompute_gelu's g
        CHECK(off >= plan.gradients + grad_end);
        CHECK(off < plan.gradients + grad_end + plan.block_bytes * (L - m) + kArenaAlign * L);
      }
      if (m + 1 < L) CHECK(plan.x[m] >= plan.x[m + 1] + plan.block_bytes);  // blocks do not overlap
    }
    CHECK(plan.total_bytes >= plan.gradients + layout.total * 4);
  }
  CHECK_THROWS(plan_gpu_vit_arena(vit_config("vit_b_32"), 10, 8, Precision::fp32, true));  // not its layout
  CHECK(GpuViT::workspace_bytes(GpuViTOptions()) == 32u << 20);
}

TEST_CASE("reduction scratch sized for a batch covers every smaller batch", "[memory]") {
  // The arena sizes the shared reduction scratch for the largest batch; a smaller batch must never
  // need more (the LayerNorm backward's block count is not monotonic in its rows: 771 rows run
  // 386 blocks, 514 rows 514 blocks).
  for (const int D : {8, 768, 1024, 1280}) {
    INFO("D=" << D);
    size_t worst_ln = 0, worst_gelu = 0, worst_gelu16 = 0, worst_col = 0;
    for (int rows = 0; rows <= 5000; ++rows) {
      worst_ln = std::max(worst_ln, layernorm_backward_scratch_floats(rows, D));
      worst_gelu = std::max(worst_gelu, gelu_backward_bias_scratch_floats(rows, 4 * D, false));
      worst_gelu16 = std::max(worst_gelu16, gelu_backward_bias_scratch_floats(rows, 4 * D, true));
      worst_col = std::max(worst_col, column_sum_scratch_floats(rows, D));
      REQUIRE(layernorm_backward_scratch_floats(rows, D) == worst_ln);
      REQUIRE(gelu_backward_bias_scratch_floats(rows, 4 * D, false) == worst_gelu);
      REQUIRE(gelu_backward_bias_scratch_floats(rows, 4 * D, true) == worst_gelu16);
      REQUIRE(column_sum_scratch_floats(rows, D) == worst_col);
      // Three partial rows per block of up to min(rows, 528) blocks (layernorm.cu).
      REQUIRE(layernorm_backward_scratch_floats(rows, D) >= 3 * (size_t)std::min(rows, 528) * D);
    }
  }
}

TEST_CASE("out-of-memory message names the allocation that does not fit and the whole need", "[memory]") {
  const MemoryEstimate e = estimate_gpu_memory(parse_args({"--model", "vit_l_32", "--batch-size", "32"}));
  CHECK(out_of_memory_message(e, e.peak_bytes(), 80ull << 30).empty());
  // 2 GiB free: the parameters (1.14 GiB) fit, the activations (with the overlaid gradients) no longer do.
  const std::string m = out_of_memory_message(e, 2ull << 30, 80ull << 30);
  CHECK_THAT(m, Catch::StartsWith("out of GPU memory allocating activations (2.03 GiB)"));
  CHECK_THAT(m, Catch::Contains("vit_l_32 at batch 32, fp32 needs "));
  CHECK_THAT(m, Catch::Contains("(parameters 1.14, gradients 0, optimizer state 0, inputs 0.04, cuBLASLt workspace 0.03, activations "));
  CHECK_THAT(m, Catch::EndsWith("but cudaMemGetInfo reports 2.00 GiB free of 80.0 GiB"));
  // A batch whose activations do not fit.
  const MemoryEstimate big = estimate_gpu_memory(parse_args({"--model", "vit_h_14", "--batch-size", "4096", "--precision", "bf16"}));
  CHECK_THAT(out_of_memory_message(big, 130ull << 30, 140ull << 30), Catch::StartsWith("out of GPU memory allocating activations ("));
  CHECK_THAT(memory_report(big), Catch::Contains("activations"));
  CHECK(gib(0) == "0");
  CHECK(gib(1ull << 30) == "1.00");
  CHECK(gib(100ull << 30) == "100.0");
}

TEST_CASE("memory estimate: --shard-optimizer keeps the optimizer state of one rank's shard, no master copy",
          "[memory][zero]") {
  // vit_l_32's 25 MiB buckets with AdamW on 1, 2, 3 and 8 ranks: DDP's parameters and gradients,
  // state 2 x 4 S, and in the reducer only, on 3 ranks, the padded copy of the largest bucket not
  // divisible by 3 (the collectives run in place, the update on the parameters).
  const ParamLayout L = make_param_layout(vit_config("vit_l_32"));
  const auto buckets = assign_buckets(L, 1 << 20, 25 << 20);
  const Options ddp = parse_args({"--model", "vit_l_32", "--optimizer", "adamw"});
  const Options zero = parse_args({"--model", "vit_l_32", "--optimizer", "adamw", "--shard-optimizer"});
  for (int n : {1, 2, 3, 8}) {
    INFO(n << " ranks");
    size_t slot = 0, padded = 0;  // by hand: sum of ceil(n_b / n); the largest n c_b with n c_b != n_b
    for (const Bucket& b : buckets) {
      const size_t c = (b.numel + n - 1) / n;
      slot += c;
      if (c * n != b.numel) padded = std::max(padded, c * n);
    }
    const MemoryEstimate z = estimate_gpu_memory(zero, L, buckets, n), d = estimate_gpu_memory(ddp, L, buckets, n);
    CHECK(z.bytes_of("optimizer state") == 2 * 4 * slot);
    CHECK(z.bytes_of("shard parameters") == 0);
    CHECK(z.bytes_of("reducer") == 4 * padded);
    CHECK((n == 3) == (padded > 0));  // vit_l_32's buckets are multiples of 8 elements
    CHECK(d.bytes_of("optimizer state") == 2 * 4 * L.total);
    CHECK(z.bytes_of("parameters") == d.bytes_of("parameters"));
    CHECK(z.bytes_of("gradients") == d.bytes_of("gradients"));
    CHECK(z.bytes_of("activations") == d.bytes_of("activations"));
    // 4P + 4kS against (4 + 4k)P on the GPU (the gradients inside the activations): 8 (P - S)
    // bytes less with AdamW, minus the padded bucket; less from 2 ranks on.
    CHECK((long long)z.persistent_bytes() - (long long)d.persistent_bytes() ==
          (long long)(8 * slot + 4 * padded) - (long long)(8 * L.total));
    if (n >= 2) CHECK(z.persistent_bytes() < d.persistent_bytes());
    if (n == 1) CHECK(z.persistent_bytes() == d.persistent_bytes());
  }
}

TEST_CASE("--recompute-gelu auto: on in fp32/tf32 where the arena shrinks, off at batches it would not",
          "[memory][options]") {
  const ParamLayout layout = make_param_layout(vit_config("vit_b_32"));
  const ViTConfig& c = layout.cfg;
  const auto arena = [&](int batch, bool recompute) {
    return plan_gpu_vit_arena(c, layout.total, batch, Precision::tf32, true, AttentionImpl::custom, PatchEmbedImpl::gemm,
                              recompute).total_bytes;
  };
  const auto resolved = [&](int batch, const char* choice) {
    return gpu_model_options(parse_args({"--model", "vit_b_32", "--precision", "tf32", "--batch-size",
                                         std::to_string(batch), "--recompute-gelu", choice}),
                             layout).recompute_gelu;
  };
  // Batch 4: the overlaid gradients set the blocks' spacing; the shared buffer only adds 2 MiB.
  REQUIRE(arena(4, true) > arena(4, false));
  CHECK_FALSE(resolved(4, "auto"));
  CHECK(resolved(4, "on"));  // asked for: done, even where it costs
  // Batch 32: 11 blocks' GELU outputs fewer.
  REQUIRE(arena(32, true) < arena(32, false));
  CHECK(resolved(32, "auto"));
  CHECK_FALSE(resolved(32, "off"));
  CHECK(estimate_gpu_memory(parse_args({"--model", "vit_b_32", "--precision", "tf32", "--batch-size", "4"}), layout, {})
            .bytes_of("activations") == arena(4, false));
  // bf16: off unless asked for.
  CHECK_FALSE(gpu_model_options(parse_args({"--model", "vit_b_32", "--precision", "bf16"}), layout).recompute_gelu);
}
