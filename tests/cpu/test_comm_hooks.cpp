// Comm hooks on the host, one process: 16-bit casts, PowerSGD's skip rule on the real vit_l_32
// table, the host PowerSGD algorithm (exactness, error feedback, start step), the options.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "model/rng.h"
#include "mpi/buckets/buckets.h"
#include "mpi/hooks/comm_hook.h"
#include "mpi/hooks/half_host.h"
#include "mpi/transports/host_transport.h"
#include "mpi/hooks/powersgd_host.h"
#include "src/app/options.h"
#include "tests/catch.h"
#include "tests/test_util.h"

using namespace vitddp;
using vitddp_test::option_error;
using vitddp_test::parse_args;

namespace {

const size_t MiB = 1048576;

/// A bucket of contiguous tensors with the given shapes.
HookBucket bucket_of(const std::vector<std::vector<int64_t>>& shapes) {
  HookBucket b;
  for (const auto& s : shapes) {
    size_t n = 1;
    for (auto d : s) n *= (size_t)d;
    b.tensors.push_back(HookTensor{b.numel, s, n});
    b.numel += n;
  }
  return b;
}

/// One rank: the all-reduce is the identity.
void no_allreduce(float*, size_t) {}

const PowerSgdTensorPlan& tensor_named(const ParamLayout& L, const std::vector<Bucket>& B,
                                       const std::vector<PowerSgdBucketPlan>& plans, const std::string& name) {
  const size_t pi = L.index_of(name);
  for (size_t b = 0; b < B.size(); ++b)
    for (size_t i = 0; i < B[b].params.size(); ++i)
      if (B[b].params[i] == pi) return plans[b].tensors[i];
  throw std::logic_error("no bucket holds " + name);
}

}  // namespace

// ------------------------------------------------------------------ 16-bit casts

TEST_CASE("16-bit casts round to nearest even, as CUDA's", "[comm_hooks]") {
  CHECK(float_to_fp16(40000.0f) == 0x78e2);  // 40000 = 1250 * 32: exact in fp16
  CHECK(fp16_to_float(0x78e2) == 40000.0f);
  CHECK(float_to_fp16(65504.0f) == 0x7bff);  // fp16 max
  CHECK(float_to_fp16(65520.0f) == 0x7c00);  // rounds up to inf
  CHECK(std::isinf(fp16_to_float(float_to_fp16(80000.0f))));
  CHECK(float_to_fp16(1.0f + 1.0f / 4096) == 0x3c00);  // below half a step (2^-10): down
  CHECK(float_to_fp16(1.0f + 1.0f / 2048) == 0x3c00);  // tie: to even (1.0)
  CHECK(float_to_fp16(1.0f + 3.0f / 2048) == 0x3c02);  // tie: to even (1 + 2^-9)
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(1.0f + 1.0f / 256) == 0x3f80);   // tie (half of 2^-7): to even
  CHECK(float_to_bf16(1.0f + 3.0f / 256) == 0x3f82);   // tie: to even
  CHECK(bf16_to_float(0x3f81) == 1.0f + 1.0f / 128);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // Divide first: 40000 / 2 = 20000 goes over the wire, not inf.
  const float x[2] = {40000.0f, -3.0f};
  uint16_t h[2];
  cast_to_16bit_host(DType::F16, x, 2, 2, h);
  CHECK(fp16_to_float(h[0]) == 20000.0f);
  CHECK(fp16_to_float(h[1]) == -1.5f);
  float back[2];
  cast_from_16bit_host(DType::F16, h, 2, back);
  CHECK(back[0] == 20000.0f);
  CHECK_THROWS_AS(cast_to_16bit_host(DType::F32, x, 2, 2, h), std::invalid_argument);
}

namespace {

/// A HookBackend that only plans: PowerSGD's state is refused, its planned bytes are 1234.
struct PlanningBackend final : HookBackend {
  std::unique_ptr<PowerSgdState> make_powersgd(const std::vector<HookBucket>&, const PowerSgdOptions&) override {
    throw std::logic_error("planning only");
  }
  size_t planned_powersgd_bytes(const std::vector<HookBucket>&, const PowerSgdOptions&) const override { return 1234; }
};

}  // namespace

TEST_CASE("comm hook registry: every name constructs, an unknown one is refused", "[comm_hooks]") {
  CHECK(compression_names() == std::vector<std::string>{"none", "fp16", "bf16", "powersgd"});
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const std::vector<HookBucket> hb = hook_buckets(L, assign_buckets(L, 1024, 4096));
  const ReducerOptions ro;
  PlanningBackend backend;
  const HookArgs args{hb, ro, 2, backend};
  for (const std::string& name : compression_names()) {
    INFO(name);
    const std::unique_ptr<CommHook> h = make_comm_hook(name, args);  // constructing allocates nothing
    REQUIRE(h);
    CHECK(h->name() == name);
    CHECK(h->uses_16bit_staging() == (name == "fp16" || name == "bf16"));
    CHECK(h->reduces_own_buffers() == (name == "powersgd"));
    CHECK(h->planned_device_bytes() == (name == "powersgd" ? 1234u : 0u));
    CHECK(h->device_bytes() == 0u);
  }
  try {
    make_comm_hook("int8", args);
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "unknown compression 'int8' (choose one of: none, fp16, bf16, powersgd)");
  }
}

TEST_CASE("host transport registry refuses an unknown name", "[comm_hooks]") {
  REQUIRE(host_transport_registry().size() == 1);
  CHECK(std::string(host_transport_registry()[0].name) == "mpi");
  try {
    make_host_transport("gloo");
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "unknown host transport 'gloo' (choose one of: mpi)");
  }
}

// ------------------------------------------------------------------ PowerSGD skip rule

TEST_CASE("PowerSGD skip rule on the vit_l_32 table (rank 1, min rate 2, 25 MiB buckets)", "[powersgd]") {
  const ParamLayout L = make_param_layout(vit_config("vit_l_32"));
  const auto B = assign_buckets(L, 1 * MiB, 25 * MiB);
  const auto HB = hook_buckets(L, B);
  std::vector<PowerSgdBucketPlan> plans;
  for (const auto& hb : HB) plans.push_back(make_powersgd_plan(hb, 1, 2.0));

  // Compressed iff (n + m) * r * 2 < n * m with r = min(n, m, 1), each tensor viewed (shape[0], rest):
  auto T = [&](const std::string& n) { return tensor_named(L, B, plans, n); };
  const std::string l0 = "encoder.layers.encoder_layer_0.";
  // class_token (1,1,1024) -> (1,1024): (1+1024)*2 = 2050 < 1024? no -> uncompressed.
  CHECK_FALSE(T("class_token").compressed);
  CHECK(T("class_token").rows == 1);
  CHECK(T("class_token").cols == 1024);
  // conv_proj.weight (1024,3,32,32) -> (1024,3072): 4096*2 = 8192 < 3,145,728 -> P 1024, Q 3072.
  CHECK(T("conv_proj.weight").compressed);
  CHECK(T("conv_proj.weight").cols == 3072);
  // pos_embedding (1,50,1024) -> (1,51200): 51201*2 < 51200? no.
  CHECK_FALSE(T("encoder.pos_embedding").compressed);
  // 1-D tensors (n,1): (n+1)*2 < n never.
  for (const char* n : {"conv_proj.bias", "encoder.ln.weight", "encoder.ln.bias", "heads.head.bias"})
    CHECK_FALSE(T(n).compressed);
  for (const char* n : {"ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "self_attention.in_proj_bias",
                        "self_attention.out_proj.bias", "mlp.0.bias", "mlp.3.bias"})
    CHECK_FALSE(T(l0 + n).compressed);
  // in_proj_weight (3072,1024): 4096*2 < 3,145,728 -> P 3072 + Q 1024 floats.
  CHECK(T(l0 + "self_attention.in_proj_weight").compressed);
  CHECK(T(l0 + "self_attention.in_proj_weight").rows == 3072);
  CHECK(T(l0 + "self_attention.out_proj.weight").compressed);  // (1024,1024): P 1024 + Q 1024
  CHECK(T(l0 + "mlp.0.weight").compressed);                    // (4096,1024): P 4096 + Q 1024
  CHECK(T(l0 + "mlp.3.weight").compressed);                    // (1024,4096): P 1024 + Q 4096
  CHECK(T("heads.head.weight").compressed);                    // (1000,1024): P 1000 + Q 1024

  // Per bucket (uncompressed + P + Q floats) x 4 bytes, by hand:
  // bucket 0 = {heads.head.bias, heads.head.weight}: 1000 + 1000 + 1024 = 3024 floats = 12,096 B.
  REQUIRE(plans.size() >= 3);
  CHECK(plans[0].uncompressed_numel == 1000);
  CHECK(plans[0].p_numel == 1000);
  CHECK(plans[0].q_numel == 1024);
  CHECK(plans[0].bytes_per_step() == 12096u);
  // bucket 1 = {encoder.ln.bias, encoder.ln.weight, layer 23 mlp.3.bias, mlp.3.weight, mlp.0.bias,
  // mlp.0.weight}: uncompressed 1024+1024+1024+4096 = 7168, P 1024+4096 = 5120, Q 4096+1024 = 5120
  // -> 17,408 floats = 69,632 B (uncompressed: 8,395,776 floats = 33,583,104 B).
  CHECK(plans[1].uncompressed_numel == 7168);
  CHECK(plans[1].p_numel == 5120);
  CHECK(plans[1].q_numel == 5120);
  CHECK(plans[1].bytes_per_step() == 69632u);
  CHECK(plans[1].compressed_count == 2);
  // bucket 2 = layer 23's {ln_2.bias, ln_2.weight, out_proj.bias, out_proj.weight, in_proj_bias,
  // in_proj_weight, ln_1.bias, ln_1.weight} + layer 22's {mlp.3.bias, mlp.3.weight}:
  // uncompressed 1024*2+1024+3072+1024*2+1024 = 9216, P 1024+3072+1024 = 5120,
  // Q 1024+1024+4096 = 6144 -> 20,480 floats = 81,920 B.
  CHECK(plans[2].uncompressed_numel == 9216);
  CHECK(plans[2].p_numel == 5120);
  CHECK(plans[2].q_numel == 6144);
  CHECK(plans[2].bytes_per_step() == 81920u);

  // Whole model per step: per layer uncompressed 4*1024 (LN) + 3072 + 1024 + 4096 + 1024 = 13,312,
  // P 3072+1024+4096+1024 = 9216, Q 1024+1024+1024+4096 = 7168 -> 29,696 floats x 24 = 712,704;
  // head 1000 + 1000 + 1024 = 3024; encoder.ln 2048; conv_proj.weight P 1024 + Q 3072 = 4096;
  // conv_proj.bias 1024, pos_embedding 51,200, class_token 1024.
  // Total 712,704 + 3024 + 2048 + 4096 + 1024 + 51,200 + 1024 = 775,120 floats = 3,100,480 B
  // instead of 306,535,400 x 4 = 1,226,141,600 B.
  uint64_t total = 0;
  size_t compressed = 0;
  for (const auto& p : plans) {
    total += p.bytes_per_step();
    compressed += p.compressed_count;
  }
  CHECK(total == 3100480u);
  CHECK(compressed == 24 * 4 + 2);  // 4 matrices per layer + conv_proj.weight + head
}

TEST_CASE("PowerSGD plan follows PyTorch's order: compressed tensors grouped by shape", "[powersgd]") {
  // (8,6) #0, (5,) #1, (7,7) #2, (2,4,3) #3 -> (2,12): 14*2 < 24? no, (8,6) #4.
  const auto plan = make_powersgd_plan(bucket_of({{8, 6}, {5}, {7, 7}, {2, 4, 3}, {8, 6}}), 1, 2.0);
  CHECK(plan.compressed_order == std::vector<size_t>{0, 4, 2});
  CHECK(plan.tensors[0].q_offset == 0);
  CHECK(plan.tensors[4].q_offset == 6);
  CHECK(plan.tensors[2].q_offset == 12);
  CHECK(plan.tensors[4].p_offset == 8);
  CHECK(plan.tensors[1].u_offset == 0);
  CHECK(plan.tensors[3].u_offset == 5);
  CHECK(plan.uncompressed_numel == 5 + 24);
  CHECK(plan.p_numel == 8 + 8 + 7);
  CHECK(plan.q_numel == 6 + 6 + 7);
  // rank is capped by min(n, m): (3,2) with rank 4 -> r = 2; rate 0 compresses everything.
  const auto p2 = make_powersgd_plan(bucket_of({{3, 2}, {4}}), 4, 0.0);
  CHECK(p2.tensors[0].rank == 2);
  CHECK(p2.tensors[1].compressed);  // (4,1), r 1: 5 * 0 < 4
  CHECK_THROWS_AS(make_powersgd_plan(bucket_of({{3, 2}}), 0, 2.0), std::invalid_argument);
}

// ------------------------------------------------------------------ PowerSGD host algorithm

TEST_CASE("Gram-Schmidt orthonormalises columns", "[powersgd]") {
  const size_t n = 9, r = 3;
  std::vector<float> a(n * r);
  for (size_t i = 0; i < a.size(); ++i) a[i] = (float)rand_normal(3, 4, i);
  orthogonalize_host(a.data(), n, r, 0.0);
  for (size_t i = 0; i < r; ++i)
    for (size_t j = 0; j < r; ++j) {
      double d = 0;
      for (size_t k = 0; k < n; ++k) d += (double)a[k * r + i] * a[k * r + j];
      CHECK(std::abs(d - (i == j ? 1.0 : 0.0)) < 1e-6);
    }
}

TEST_CASE("PowerSGD is exact on rank-1 gradients and keeps the residual as error", "[powersgd]") {
  const HookBucket hb = bucket_of({{6, 5}, {4}, {3, 2, 4}});
  PowerSgdOptions o;
  o.start_iter = 0;
  PowerSgdHost h({hb}, o, 1);
  REQUIRE(h.plan(0).compressed_count == 2);  // (6,5) and (3,8)
  std::vector<float> g(hb.numel);
  // Each matrix u v^T: M Q = u (v.Q) spans u, so P Q^T = u v^T exactly.
  for (const auto& t : hb.tensors) {
    const size_t n = (size_t)t.shape[0], m = t.numel / n;
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k < m; ++k) g[t.offset + i * m + k] = (float)((i + 1.0) * (0.5 - 0.25 * k));
  }
  std::vector<float> out = g;
  const BucketCommReport rep = h.run_bucket(0, out.data(), no_allreduce);
  for (size_t i = 0; i < g.size(); ++i) CHECK(out[i] == Approx(g[i]).margin(1e-5));
  CHECK(rep.compressed);
  CHECK(rep.bytes_sent == h.plan(0).bytes_per_step());
  for (float e : h.error(0)) CHECK(std::abs(e) < 1e-5);
}

TEST_CASE("PowerSGD error feedback carries exactly the residual", "[powersgd]") {
  const HookBucket hb = bucket_of({{8, 6}, {5}, {7, 7}});
  PowerSgdOptions o;
  o.start_iter = 0;
  PowerSgdHost h({hb}, o, 1);
  std::vector<float> old_error(hb.numel, 0.0f);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> in(hb.numel);
    for (size_t i = 0; i < in.size(); ++i) in[i] = (float)rand_normal(9, step, i);
    std::vector<float> out = in;
    h.run_bucket(0, out.data(), no_allreduce);
    h.end_step();
    const auto& err = h.error(0);
    REQUIRE(err.size() == hb.numel);
    double worst = 0;  // relative to the magnitude of the input + old error (float roundings)
    for (size_t i = 0; i < in.size(); ++i) {
      const double want = (double)in[i] + old_error[i] - out[i];
      worst = std::max(worst, std::abs(err[i] - want) / std::max(1.0, std::abs((double)in[i] + old_error[i])));
    }
    CHECK(worst <= 1e-6);
    // A random matrix is not rank 1: the error is not zero on the compressed tensors...
    double e2 = 0;
    for (size_t i = 0; i < 48; ++i) e2 += (double)err[i] * err[i];
    CHECK(e2 > 1e-3);
    // ...and zero on the uncompressed 1-D tensor (one rank: its average is itself).
    for (size_t i = 48; i < 53; ++i) CHECK(err[i] == 0.0f);
    old_error = err;
  }
}

TEST_CASE("PowerSGD waits for its start step; one iteration per step", "[powersgd]") {
  const HookBucket hb = bucket_of({{8, 6}, {5}});
  PowerSgdOptions o;
  o.start_iter = 2;
  PowerSgdHost h({hb, hb}, o, 2);  // world size 2 with an identity all-reduce: plain = halving
  for (int step = 0; step < 4; ++step) {
    CHECK(h.iteration() == step);
    CHECK(h.compressing() == (step >= 2));
    for (size_t b = 0; b < 2; ++b) {
      std::vector<float> x(hb.numel, 3.0f);
      const BucketCommReport r = h.run_bucket(b, x.data(), no_allreduce);
      if (step < 2) {
        CHECK_FALSE(r.compressed);
        CHECK(r.bytes_sent == 4u * hb.numel);
        for (float v : x) CHECK(v == 1.5f);  // divided by the world size, summed by the identity
        CHECK(h.error(b).empty());
      } else {
        CHECK(r.compressed);
        CHECK(r.bytes_sent == 4u * (5 + 8 + 6));
      }
    }
    h.end_step();
  }
  CHECK(h.iteration() == 4);
}

TEST_CASE("PowerSGD without warm start draws new Qs every step", "[powersgd]") {
  const HookBucket hb = bucket_of({{8, 6}});
  PowerSgdOptions o;
  o.start_iter = 0;
  o.warm_start = false;
  o.error_feedback = false;
  std::vector<int64_t> draws;
  o.q_init = [&](size_t, size_t, int64_t it, float* q, size_t m, size_t r) {
    draws.push_back(it);
    for (size_t i = 0; i < m * r; ++i) q[i] = (float)rand_normal(1, it, i);
  };
  PowerSgdHost h({hb}, o, 1);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> x(hb.numel, 1.0f);
    h.run_bucket(0, x.data(), no_allreduce);
    h.end_step();
  }
  CHECK(draws == std::vector<int64_t>{0, 1, 2});
  CHECK(h.error(0).empty());
  o.warm_start = true;
  draws.clear();
  PowerSgdHost w({hb}, o, 1);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> x(hb.numel, 1.0f);
    w.run_bucket(0, x.data(), no_allreduce);
    w.end_step();
  }
  CHECK(draws == std::vector<int64_t>{0});
}

// ------------------------------------------------------------------ options

TEST_CASE("compression options and their defaults", "[options][comm_hooks]") {
  const Options d = parse_args({});
  CHECK(d.compression == Compression::None);
  CHECK(d.grad_as_bucket_view);
  CHECK(d.powersgd_rank == 1);
  CHECK(d.powersgd_start_step == 1000);
  CHECK(d.powersgd_min_compression_rate == 2.0);
  CHECK(d.powersgd_error_feedback);
  CHECK(d.powersgd_warm_start);
  const ReducerOptions rd = reducer_options(d);
  CHECK(rd.compression == "none");
  CHECK(rd.overlap);
  CHECK(rd.grad_as_bucket_view);

  const Options o = parse_args({"--compression", "powersgd", "--powersgd-rank", "4", "--powersgd-start-step", "2",
                           "--powersgd-min-compression-rate=1.5", "--powersgd-no-error-feedback",
                           "--powersgd-no-warm-start", "--grad-as-bucket-view", "off", "--no-overlap", "--seed", "7"});
  const ReducerOptions r = reducer_options(o);
  CHECK(r.compression == "powersgd");
  CHECK(r.powersgd.rank == 4);
  CHECK(r.powersgd.start_iter == 2);
  CHECK(r.powersgd.min_compression_rate == 1.5);
  CHECK_FALSE(r.powersgd.error_feedback);
  CHECK_FALSE(r.powersgd.warm_start);
  CHECK(r.powersgd.seed == 7u);
  CHECK_FALSE(r.grad_as_bucket_view);
  CHECK_FALSE(r.overlap);
  CHECK(reducer_options(parse_args({"--compression", "bf16"})).compression == "bf16");
  CHECK(reducer_options(parse_args({"--compression", "fp16"})).compression == "fp16");

  CHECK(option_error({"--compression", "int8"}).rfind("--compression: unknown value 'int8'", 0) == 0);
  CHECK(option_error({"--grad-as-bucket-view", "maybe"}).rfind("--grad-as-bucket-view: unknown value 'maybe'", 0) == 0);
  CHECK(option_error({"--powersgd-rank", "0"}).rfind("--powersgd-rank: must be in [1,", 0) == 0);
  CHECK(option_error({"--powersgd-start-step", "-1"}).rfind("--powersgd-start-step: must be in [0,", 0) == 0);
  CHECK(option_error({"--powersgd-min-compression-rate", "x"}) ==
        "--powersgd-min-compression-rate: expected a finite number, got 'x'");
  CHECK(option_error({"--powersgd-no-warm-start=1"}) == "--powersgd-no-warm-start: takes no value");
}

TEST_CASE("PowerSGD start-up warning when the start step is never reached", "[options][comm_hooks]") {
  // Default run: 10 + 3 + 1 = 14 steps < 1000.
  const std::string w = powersgd_start_warning(parse_args({"--compression", "powersgd"}));
  CHECK(w.rfind("PowerSGD would never compress in this run: PyTorch's default start_powerSGD_iter=1000", 0) !=
        std::string::npos);
  CHECK(w.find("14 steps") != std::string::npos);
  CHECK(powersgd_start_warning(parse_args({"--compression", "powersgd", "--powersgd-start-step", "13"})).empty());
  CHECK_FALSE(powersgd_start_warning(parse_args({"--compression", "powersgd", "--powersgd-start-step", "14"})).empty());
  CHECK(powersgd_start_warning(parse_args({})).empty());  // no PowerSGD, no warning
  CHECK(powersgd_start_warning(parse_args({"--compression", "fp16"})).empty());
}
