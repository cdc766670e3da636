// The host PowerSGD against PyTorch's own powerSGD_hook: tests/data/powersgd_reference.txt, made by
// tests/reference/powersgd_reference.py (one process, world size 1), holds inputs, the random
// initial Qs PyTorch drew, outputs and errors per step for several configurations. The Qs are
// injected through PowerSgdOptions::q_init, so outputs must agree to fp32 rounding.
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "mpi/reducer/reducer_options.h"
#include "mpi/hooks/powersgd_host.h"
#include "tests/catch.h"

using namespace vitddp;

namespace {

const char* kGenerate =
    "generate it where torch is installed (e.g. the GPU machine) with:\n"
    "  python3 tests/reference/powersgd_reference.py > tests/data/powersgd_reference.txt\n"
    "and commit the file";

struct Call {
  int step = 0, bucket = 0;
  std::vector<float> input, output, error;
  struct Q {
    size_t m = 0, r = 0;
    std::vector<float> v;
  };
  std::vector<Q> qs;
};

struct Config {
  std::string name;
  PowerSgdOptions opts;
  int steps = 0;
  std::vector<HookBucket> buckets;
  std::vector<Call> calls;
};

std::vector<float> read_values(std::istringstream& in) {
  size_t n = 0;
  in >> n;
  std::vector<float> v(n);
  for (auto& x : v) in >> x;
  if (!in) throw std::runtime_error("truncated value list");
  return v;
}

std::vector<int64_t> parse_shape(const std::string& s) {
  std::vector<int64_t> shape;
  std::stringstream ss(s);
  std::string d;
  while (std::getline(ss, d, 'x')) shape.push_back(std::stoll(d));
  return shape;
}

std::vector<Config> load(const std::string& path) {
  std::ifstream f(path);
  if (!f) FAIL("missing " << path << ": " << kGenerate);
  std::vector<Config> configs;
  std::string line;
  std::getline(f, line);
  if (line != "powersgd_reference 1") FAIL(path << ": unexpected header '" << line << "'");
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "config") {
      Config c;
      std::string k;
      int ef = 1, ws = 1;
      in >> c.name >> k >> c.opts.rank >> k >> c.opts.min_compression_rate >> k >> c.opts.start_iter >> k >> ef >> k >>
          ws >> k >> c.steps;
      c.opts.error_feedback = ef != 0;
      c.opts.warm_start = ws != 0;
      configs.push_back(c);
    } else if (key == "bucket") {
      int b = 0;
      in >> b;
      HookBucket hb;
      std::string s;
      while (in >> s) {
        const auto shape = parse_shape(s);
        size_t n = 1;
        for (auto d : shape) n *= (size_t)d;
        hb.tensors.push_back(HookTensor{hb.numel, shape, n});
        hb.numel += n;
      }
      configs.back().buckets.push_back(hb);
    } else if (key == "step") {
      Call c;
      std::string k;
      in >> c.step >> k >> c.bucket;
      configs.back().calls.push_back(c);
    } else if (key == "input") {
      configs.back().calls.back().input = read_values(in);
    } else if (key == "q") {
      Call::Q q;
      size_t ordinal = 0;
      in >> ordinal >> q.m >> q.r;
      q.v.resize(q.m * q.r);
      for (auto& x : q.v) in >> x;
      auto& qs = configs.back().calls.back().qs;
      if (ordinal != qs.size()) FAIL(path << ": q records out of order");
      qs.push_back(q);
    } else if (key == "output") {
      configs.back().calls.back().output = read_values(in);
    } else if (key == "error") {
      configs.back().calls.back().error = read_values(in);
    }
  }
  return configs;
}

}  // namespace

TEST_CASE("host PowerSGD agrees with PyTorch's powerSGD_hook", "[powersgd][reference]") {
  const std::string path = std::string(VITDDP_TEST_DATA) + "/powersgd_reference.txt";
  const auto configs = load(path);
  REQUIRE(configs.size() >= 3);
  for (const Config& c : configs) {
    INFO("config " << c.name);
    REQUIRE(c.calls.size() == (size_t)c.steps * c.buckets.size());
    // The Qs PyTorch drew, by (iteration, bucket, ordinal).
    std::map<std::tuple<int64_t, size_t, size_t>, const Call::Q*> qs;
    for (const Call& call : c.calls)
      for (size_t k = 0; k < call.qs.size(); ++k) qs[{call.step, (size_t)call.bucket, k}] = &call.qs[k];
    PowerSgdOptions o = c.opts;
    size_t injected = 0;
    o.q_init = [&](size_t b, size_t ordinal, int64_t it, float* q, size_t m, size_t r) {
      const auto found = qs.find({it, b, ordinal});
      if (found == qs.end()) FAIL("PyTorch drew no Q for iteration " << it << ", bucket " << b << ", tensor " << ordinal);
      REQUIRE(found->second->m == m);
      REQUIRE(found->second->r == r);
      std::copy(found->second->v.begin(), found->second->v.end(), q);
      ++injected;
    };
    PowerSgdHost h(c.buckets, o, 1);
    size_t i = 0;
    for (int step = 0; step < c.steps; ++step) {
      for (size_t b = 0; b < c.buckets.size(); ++b, ++i) {
        const Call& call = c.calls[i];
        INFO("step " << step << ", bucket " << b);
        REQUIRE(call.step == step);
        REQUIRE((size_t)call.bucket == b);
        REQUIRE(call.input.size() == c.buckets[b].numel);
        std::vector<float> x = call.input;
        h.run_bucket(b, x.data(), [](float*, size_t) {});
        double worst = 0;
        for (size_t k = 0; k < x.size(); ++k)
          worst = std::max(worst, std::abs((double)x[k] - call.output[k]) / std::max(1.0, std::abs((double)call.output[k])));
        CHECK(worst <= 1e-5);
        if (call.error.empty()) {
          CHECK(h.error(b).empty());
        } else {
          REQUIRE(h.error(b).size() == call.error.size());
          double we = 0;
          for (size_t k = 0; k < x.size(); ++k)
            we = std::max(we, std::abs((double)h.error(b)[k] - call.error[k]) / std::max(1.0, std::abs((double)call.error[k])));
          CHECK(we <= 1e-5);
        }
      }
      h.end_step();
    }
    size_t drawn = 0;
    for (const Call& call : c.calls) drawn += call.qs.size();
    CHECK(injected == drawn);  // every Q PyTorch drew was drawn here too, at the same moment
  }
}
