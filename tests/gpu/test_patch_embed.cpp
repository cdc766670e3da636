// The patch embedding's data movement of cuda/kernels/patch_embed.h (patch_im2col,
// assemble_tokens, assemble_tokens_backward) in fp32 and bf16, with the bf16 column sums of
// cuda/kernels/reduce.h, against host_im2col and host_assemble_tokens_backward of
// tests/gpu/patch_reference.h. CPU twin: the im2col and the embeddings of CpuViT's forward and
// backward in model/cpu_vit.cpp.
#include <cuda_bf16.h>

#include <vector>

#include "cuda/kernels/patch_embed.h"
#include "cuda/kernels/reduce.h"
#include "tests/catch.h"
#include "tests/gpu/bf16_test_util.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/patch_reference.h"

using namespace vitddp;
using namespace vitddp_test;
using bf16 = __nv_bfloat16;

TEST_CASE("patch_embed: im2col, token assembly and its backward match host loops",
          "[gpu][patch_embed]") {
  REQUIRE_GPU();
  Stream st;
  const PatchGeometry g = small_patch_geometry();
  const int B = g.batch, D = g.hidden, Np = g.num_patches(), T = g.seq_len();
  const auto himg = normal_vec((size_t)B * g.channels * g.image * g.image, 8, 0),
             hemb = normal_vec((size_t)B * Np * D, 8, 1), hcls = normal_vec(D, 8, 2),
             hpos = normal_vec((size_t)T * D, 8, 3), hdh = normal_vec((size_t)B * T * D, 8, 4),
             hdcls0 = normal_vec(D, 8, 5), hdpos0 = normal_vec((size_t)T * D, 8, 6);
  const std::vector<float> patches = host_im2col(himg, g);
  std::vector<float> h((size_t)B * T * D);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int d = 0; d < D; ++d)
        h[((size_t)b * T + t) * D + d] =
            (t == 0 ? hcls[d] : hemb[((size_t)b * Np + t - 1) * D + d]) + hpos[(size_t)t * D + d];
  const TokenGrads ref = host_assemble_tokens_backward(hdh, g);
  const std::vector<float>& demb = ref.demb;
  const std::vector<double>&dcls = ref.dcls, &dpos = ref.dpos;
  DevVec<float> img(himg), pd(patches.size()), emb(hemb), cls(hcls), pos(hpos), hd(h.size()),
      dh(hdh), dembd(demb.size()), dclsd(hdcls0), dposd(hdpos0);
  patch_im2col(img.get(), pd.get(), g, st.s);
  CHECK(pd.download() == patches);
  assemble_tokens(emb.get(), cls.get(), pos.get(), hd.get(), g, st.s);
  CHECK(hd.download() == h);
  assemble_tokens_backward(dh.get(), dembd.get(), dclsd.get(), dposd.get(), true, g, st.s);
  CHECK(dembd.download() == demb);
  std::vector<double> dcls_acc(D), dpos_acc(dpos.size());
  for (int d = 0; d < D; ++d) dcls_acc[d] = dcls[d] + hdcls0[d];
  for (size_t i = 0; i < dpos.size(); ++i) dpos_acc[i] = dpos[i] + hdpos0[i];
  CHECK(norm_rel_err(dclsd.download(), dcls_acc) < 1e-6);
  CHECK(norm_rel_err(dposd.download(), dpos_acc) < 1e-6);
  assemble_tokens_backward(dh.get(), dembd.get(), dclsd.get(), dposd.get(), false, g, st.s);
  CHECK(norm_rel_err(dclsd.download(), dcls) < 1e-6);
  CHECK(norm_rel_err(dposd.download(), dpos) < 1e-6);
}

TEST_CASE("patch_embed and reduce: bf16 im2col, bf16 patch-embedding gradient, bf16 column sums",
          "[gpu][patch_embed][reduce][bf16]") {
  REQUIRE_GPU();
  Stream st;
  const PatchGeometry g = small_patch_geometry();
  const int D = g.hidden, T = g.seq_len();
  const auto himg = normal_vec((size_t)g.batch * g.channels * g.image * g.image, 26, 0),
             hdh = normal_vec((size_t)g.batch * T * D, 26, 1);
  const std::vector<float> patches = rounded(host_im2col(himg, g));
  const TokenGrads ref = host_assemble_tokens_backward(hdh, g);
  const std::vector<float> demb = rounded(ref.demb);
  const std::vector<double>&dcls = ref.dcls, &dpos = ref.dpos;
  DevVec<float> img(himg), dh(hdh), dcl(D), dps((size_t)T * D);
  DevVec<bf16> pd(patches.size()), dembd(demb.size());
  patch_im2col(img.get(), pd.get(), g, st.s);
  CHECK(to_float(pd.download()) == patches);
  assemble_tokens_backward(dh.get(), dembd.get(), dcl.get(), dps.get(), false, g, st.s);
  CHECK(to_float(dembd.download()) == demb);
  CHECK(norm_rel_err(dcl.download(), dcls) < 1e-6);
  CHECK(norm_rel_err(dps.download(), dpos) < 1e-6);

  // Column sums of bf16 rows, fp32 accumulation (and accumulate=true adds).
  const int R = 1600, Cc = 1024;
  const auto hx = rounded(normal_vec((size_t)R * Cc, 26, 2)), ho = normal_vec(Cc, 26, 3);
  std::vector<double> s(Cc, 0), s2(Cc);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < Cc; ++c) s[c] += hx[(size_t)r * Cc + c];
  for (int c = 0; c < Cc; ++c) s2[c] = s[c] + ho[c];
  DevVec<bf16> x(to_bf16(hx));
  DevVec<float> out(ho), scratch(column_sum_scratch_floats(R, Cc));
  column_sum(x.get(), R, Cc, Cc, out.get(), true, scratch.get(), st.s);
  CHECK(norm_rel_err(out.download(), s2) < 1e-6);
  column_sum(x.get(), R, Cc, Cc, out.get(), false, scratch.get(), st.s);
  CHECK(norm_rel_err(out.download(), s) < 1e-6);
}
