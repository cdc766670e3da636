// Column sums of cuda/kernels/reduce.h (column_sum, fp32 rows; the bf16 rows are in
// test_patch_embed.cpp, the fused GELU bias sums in test_gelu.cpp) against host loops in double
// written here. CPU twin: the bias gradients of linear_bwd in model/cpu_vit.cpp.
#include <tuple>
#include <vector>

#include "cuda/kernels/reduce.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;

TEST_CASE("reduce: column sums match host loops", "[gpu][reduce]") {
  REQUIRE_GPU();
  Stream st;
  for (const auto& [R, C, ld] : std::vector<std::tuple<int, int, int>>{{1600, 1024, 1024}, {4, 1000, 1000}, {300, 37, 40}}) {
    INFO("rows=" << R << " cols=" << C << " ld=" << ld);
    const auto hx = normal_vec((size_t)R * ld, 7, 0), ho = normal_vec(C, 7, 1);
    std::vector<double> s(C, 0), s2(C);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) s[c] += hx[(size_t)r * ld + c];
    for (int c = 0; c < C; ++c) s2[c] = s[c] + ho[c];
    DevVec<float> x(hx), out(ho), scratch(column_sum_scratch_floats(R, C));
    column_sum(x.get(), R, C, ld, out.get(), true, scratch.get(), st.s);
    CHECK(norm_rel_err(out.download(), s2) < 1e-6);
    column_sum(x.get(), R, C, ld, out.get(), false, scratch.get(), st.s);
    const auto first = out.download();
    CHECK(norm_rel_err(first, s) < 1e-6);
    column_sum(x.get(), R, C, ld, out.get(), false, scratch.get(), st.s);
    CHECK(out.download() == first);  // deterministic
  }
}
