// Weights files (src/io/weights_io.h): save -> load round trip, the file as a plain HDF5 reader (and
// torch_twin.py --load) sees it, load errors that name the file and the parameter, and a small
// twin-format file written here with the HDF5 C API the way h5py writes torch_twin.py's files.
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/init.h"
#include "model/param_layout.h"
#include "src/io/weights_io.h"
#include "tests/catch.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace vitddp;
using vitddp_test::random_params;
using vitddp_test::TempDir;

namespace {

// Checks that string `s` contains `sub`, printing `s` when it does not.
#define CHECK_CONTAINS(s, sub)                         \
  do {                                                 \
    const std::string s_ = (s);                        \
    INFO("message: " << s_);                           \
    CHECK(s_.find(sub) != std::string::npos);          \
  } while (0)

// The message of the std::runtime_error that `f` throws ("" and a failed check if none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL_CHECK("no std::runtime_error thrown");
  return "";
}

// ---- A writer with the plain C API, standing in for h5py (what torch_twin.py uses). ----

struct H5Writer {
  hid_t file;
  explicit H5Writer(const std::string& path) {
    file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(file >= 0);
  }
  ~H5Writer() { H5Fclose(file); }

  void dataset(const std::string& name, const std::vector<hsize_t>& dims, hid_t file_type, hid_t mem_type,
               const void* data) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    REQUIRE(H5Pset_create_intermediate_group(lcpl, 1) >= 0);
    hid_t space = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple((int)dims.size(), dims.data(), nullptr);
    hid_t d = H5Dcreate2(file, name.c_str(), file_type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(d >= 0);
    REQUIRE(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(d);
    H5Sclose(space);
    H5Pclose(lcpl);
  }
  void f32(const std::string& name, const std::vector<hsize_t>& dims, const float* data) {
    dataset(name, dims, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data);
  }
  // h5py: str attributes are scalar variable-length UTF-8 strings, floats float64, ints int64.
  void attr_str(const std::string& name, const std::string& value) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(file, name.c_str(), t, s, H5P_DEFAULT, H5P_DEFAULT);
    const char* p = value.c_str();
    REQUIRE(H5Awrite(a, t, &p) >= 0);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
  }
  void attr_num(const std::string& name, hid_t file_type, hid_t mem_type, const void* v) {
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(file, name.c_str(), file_type, s, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(H5Awrite(a, mem_type, v) >= 0);
    H5Aclose(a);
    H5Sclose(s);
  }
  // One float32 dataset per parameter under /<group>, torchvision shapes, from a flat buffer.
  void param_group(const std::string& group, const ParamLayout& L, const std::vector<float>& flat) {
    for (const ParamInfo& p : L.params)
      f32(group + "/" + p.name, std::vector<hsize_t>(p.shape.begin(), p.shape.end()), flat.data() + p.offset);
  }
};

std::vector<int64_t> h5_shape(hid_t d) {
  hid_t s = H5Dget_space(d);
  const int r = H5Sget_simple_extent_ndims(s);
  std::vector<hsize_t> dims(r);
  H5Sget_simple_extent_dims(s, dims.data(), nullptr);
  H5Sclose(s);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

}  // namespace

TEST_CASE("weights: save -> load round trip is exact, padding zeroed, no .tmp left", "[weights]") {
  TempDir dir("vitddp_weights_");
  for (const char* model : {"vit_micro", "vit_tiny"}) {
    INFO(model);
    const ParamLayout L = make_param_layout(vit_config(model));
    const std::vector<float> params = random_params(L, 7);
    const std::string path = dir.file(std::string(model) + ".h5");
    save_weights(path, L, params.data(), false);
    CHECK(fs::exists(path));
    CHECK_FALSE(fs::exists(path + ".tmp"));

    std::vector<float> back(L.total, std::numeric_limits<float>::quiet_NaN());
    load_weights(path, L, back.data());
    std::vector<bool> is_param(L.total, false);
    for (const ParamInfo& p : L.params)
      for (size_t i = 0; i < p.numel; ++i) is_param[p.offset + i] = true;
    size_t mismatches = 0, padding = 0;
    for (size_t i = 0; i < L.total; ++i) {
      if (is_param[i]) {
        mismatches += back[i] != params[i];  // bit-exact (no NaNs in params)
      } else {
        ++padding;
        CHECK(back[i] == 0.0f);
      }
    }
    CHECK(mismatches == 0);
    if (std::string(model) == "vit_micro") CHECK(padding > 0);  // head bias of 5 -> 3 padding elements
  }
}

TEST_CASE("weights: the file is /params/<torchvision name> float32 in torchvision shapes", "[weights]") {
  TempDir dir("vitddp_weights_");
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const std::vector<float> params = random_params(L, 11);
  const std::string path = dir.file("w.h5");
  save_weights(path, L, params.data(), false);

  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(f >= 0);
  hid_t g = H5Gopen2(f, "/params", H5P_DEFAULT);
  REQUIRE(g >= 0);
  H5G_info_t info;
  REQUIRE(H5Gget_info(g, &info) >= 0);
  CHECK(info.nlinks == L.params.size());
  H5Gclose(g);
  for (const ParamInfo& p : L.params) {
    INFO(p.name);
    hid_t d = H5Dopen2(f, ("/params/" + p.name).c_str(), H5P_DEFAULT);
    REQUIRE(d >= 0);
    CHECK(h5_shape(d) == p.shape);
    hid_t t = H5Dget_type(d);
    CHECK(H5Tequal(t, H5T_IEEE_F32LE) > 0);
    H5Tclose(t);
    std::vector<float> v(p.numel);
    REQUIRE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
    CHECK(std::equal(v.begin(), v.end(), params.begin() + p.offset));
    H5Dclose(d);
  }
  H5Fclose(f);
  CHECK(load_string_attr(path, "model") == "vit_micro");
  CHECK(load_string_attr(path, "format") == "vitddp-weights");
  // One tensor through the generic reader, with its exact shape.
  const ParamInfo& w = L.params[L.index_of("heads.head.weight")];
  const std::vector<float> hw = load_float_array(path, "/params/heads.head.weight", w.shape);
  CHECK(std::equal(hw.begin(), hw.end(), params.begin() + w.offset));
}

TEST_CASE("weights: an existing file is kept without overwrite and replaced with it", "[weights]") {
  TempDir dir("vitddp_weights_");
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const std::string path = dir.file("w.h5");
  const std::vector<float> a = random_params(L, 1), b = random_params(L, 2);
  save_weights(path, L, a.data(), false);
  const std::string msg = error_of([&] { save_weights(path, L, b.data(), false); });
  CHECK_CONTAINS(msg, path);
  CHECK_CONTAINS(msg, "refusing to overwrite");
  CHECK_FALSE(fs::exists(path + ".tmp"));
  std::vector<float> back(L.total);
  load_weights(path, L, back.data());
  CHECK(back[L.params[0].offset] == a[L.params[0].offset]);

  // A stale .tmp from a crashed save is simply overwritten.
  { std::ofstream(path + ".tmp") << "partial"; }
  save_weights(path, L, b.data(), true);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  load_weights(path, L, back.data());
  for (const ParamInfo& p : L.params) CHECK(std::equal(back.begin() + p.offset, back.begin() + p.offset + p.numel,
                                                       b.begin() + p.offset));

  const std::string nodir = dir.file("no/such/dir/w.h5");
  CHECK_CONTAINS(error_of([&] { save_weights(nodir, L, a.data(), false); }), "does not exist");
}

TEST_CASE("weights: load errors name the file and the parameter", "[weights]") {
  TempDir dir("vitddp_weights_");
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const std::vector<float> params = random_params(L, 3);
  std::vector<float> out(L.total);

  SECTION("missing file") {
    const std::string path = dir.file("absent.h5");
    const std::string msg = error_of([&] { load_weights(path, L, out.data()); });
    CHECK_CONTAINS(msg, path);
    CHECK_CONTAINS(msg, "no such file");
  }
  SECTION("not an HDF5 file") {
    const std::string path = dir.file("text.h5");
    { std::ofstream(path) << "not hdf5\n"; }
    const std::string msg = error_of([&] { load_weights(path, L, out.data()); });
    CHECK_CONTAINS(msg, path);
    CHECK_CONTAINS(msg, "not an HDF5 file");
  }
  SECTION("no /params group") {
    const std::string path = dir.file("empty.h5");
    { H5Writer w(path); }
    const std::string msg = error_of([&] { load_weights(path, L, out.data()); });
    CHECK_CONTAINS(msg, path);
    CHECK_CONTAINS(msg, "/params");
  }
  SECTION("missing parameter") {
    const std::string path = dir.file("missing.h5");
    save_weights(path, L, params.data(), false);
    {
      hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      REQUIRE(f >= 0);
      REQUIRE(H5Ldelete(f, "/params/encoder.layers.encoder_layer_1.mlp.0.bias", H5P_DEFAULT) >= 0);
      H5Fclose(f);
    }
    const std::string msg = error_of([&] { load_weights(path, L, out.data()); });
    CHECK_CONTAINS(msg, path);
    CHECK_CONTAINS(msg, "'encoder.layers.encoder_layer_1.mlp.0.bias'");
    CHECK_CONTAINS(msg, "missing");
  }
  SECTION("wrong shape") {
    const std::string path = dir.file("shape.h5");
    {
      H5Writer w(path);
      w.param_group("/params", L, params);
      REQUIRE(H5Ldelete(w.file, "/params/heads.head.weight", H5P_DEFAULT) >= 0);
      std::vector<float> t(8 * 5, 0.5f);
      w.f32("/params/heads.head.weight", {8, 5}, t.data());  // transposed: torchvision has [5, 8]
    }
    const std::string msg = error_of([&] { load_weights(path, L, out.data()); });
    CHECK_CONTAINS(msg, path);
    CHECK_CONTAINS(msg, "'heads.head.weight'");
    CHECK_CONTAINS(msg, "shape [8, 5], expected [5, 8]");
  }
  SECTION("wrong element type") {
    const std::string path = dir.file("dtype.h5");
    {
      H5Writer w(path);
      w.param_group("/params", L, params);
      REQUIRE(H5Ldelete(w.file, "/params/encoder.ln.weight", H5P_DEFAULT) >= 0);
      std::vector<double> t(8, 1.0);
      w.dataset("/params/encoder.ln.weight", {8}, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, t.data());
    }
    const std::string msg = error_of([&] { load_weights(path, L, out.data()); });
    CHECK_CONTAINS(msg, "'encoder.ln.weight'");
    CHECK_CONTAINS(msg, "float64, expected float32");
  }
  SECTION("unexpected entries (strict, as load_state_dict)") {
    const std::string path = dir.file("extra.h5");
    {
      H5Writer w(path);
      w.param_group("/params", L, params);
      const float x = 1;
      w.f32("/params/heads.head.extra", {1}, &x);
    }
    const std::string msg = error_of([&] { load_weights(path, L, out.data()); });
    CHECK_CONTAINS(msg, "'heads.head.extra'");
  }
  SECTION("another model's file") {
    const ParamLayout tiny = make_param_layout(vit_config("vit_tiny"));
    const std::vector<float> tp = random_params(tiny, 4);
    const std::string path = dir.file("tiny.h5");
    save_weights(path, tiny, tp.data(), false);
    const std::string msg = error_of([&] { load_weights(path, L, out.data()); });
    CHECK_CONTAINS(msg, path);
    CHECK_CONTAINS(msg, "class_token");  // the first parameter checked: [1, 1, 64] vs [1, 1, 8]
  }
}

TEST_CASE("weights: a twin-format file written with the C API (as h5py writes it) loads", "[weights]") {
  TempDir dir("vitddp_weights_");
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const ViTConfig& c = L.cfg;
  const int B = 3;
  const std::vector<float> p0 = random_params(L, 21), grads = random_params(L, 22), p3 = random_params(L, 23);
  std::vector<float> images((size_t)B * c.channels * c.image_size * c.image_size);
  for (size_t i = 0; i < images.size(); ++i) images[i] = 0.001f * (float)i - 0.5f;
  const std::vector<int32_t> labels = {4, 0, 2};
  std::vector<float> logits((size_t)B * c.num_classes);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = (float)i * 0.25f;
  const float loss = 1.609438f;
  const std::string path = dir.file("twin_vit_micro.h5");
  auto write_twin = [&](const std::string& model, int32_t first_label) {
    H5Writer w(path);
    w.param_group("/params", L, p0);
    w.param_group("/grads", L, grads);
    w.param_group("/params_after_3_steps", L, p3);
    w.f32("/input/images", {(hsize_t)B, (hsize_t)c.channels, (hsize_t)c.image_size, (hsize_t)c.image_size},
          images.data());
    std::vector<int32_t> lab = labels;
    lab[0] = first_label;
    w.dataset("/input/labels", {(hsize_t)B}, H5T_STD_I32LE, H5T_NATIVE_INT32, lab.data());
    w.f32("/logits", {(hsize_t)B, (hsize_t)c.num_classes}, logits.data());
    w.f32("/loss", {}, &loss);
    w.attr_str("model", model);
    w.attr_str("torch_version", "2.11.0+cu130");
    const int64_t seed = 1234;
    const double lr = 0.01, mom = 0.9, wd = 1e-4;
    w.attr_num("seed", H5T_STD_I64LE, H5T_NATIVE_INT64, &seed);
    w.attr_num("lr", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &lr);
    w.attr_num("momentum", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &mom);
    w.attr_num("weight_decay", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &wd);
  };

  write_twin("vit_micro", labels[0]);
  const TwinReference r = load_twin_reference(path, L);
  CHECK(r.model == "vit_micro");
  CHECK(r.torch_version == "2.11.0+cu130");
  CHECK(r.seed == 1234);
  CHECK(r.sgd.lr == 0.01);
  CHECK(r.sgd.momentum == 0.9);
  CHECK(r.sgd.weight_decay == 1e-4);
  CHECK(r.batch == B);
  CHECK(r.images == images);
  CHECK(r.labels == labels);
  CHECK(r.logits == logits);
  CHECK(r.loss == loss);
  for (const ParamInfo& p : L.params) {
    INFO(p.name);
    CHECK(std::equal(p0.begin() + p.offset, p0.begin() + p.offset + p.numel, r.params.begin() + p.offset));
    CHECK(std::equal(grads.begin() + p.offset, grads.begin() + p.offset + p.numel, r.grads.begin() + p.offset));
    CHECK(std::equal(p3.begin() + p.offset, p3.begin() + p.offset + p.numel,
                     r.params_after_3_steps.begin() + p.offset));
  }
  // Its forward half alone (the layout torch_twin.py --load writes).
  const TwinForward fw = load_twin_forward(path, L);
  CHECK(fw.model == "vit_micro");
  CHECK(fw.batch == B);
  CHECK(fw.labels == labels);
  CHECK(fw.images == images);
  CHECK(fw.logits == logits);
  CHECK(fw.loss == loss);
  // A twin file is also a weights file (/params).
  std::vector<float> w(L.total);
  load_weights(path, L, w.data());
  CHECK(w == r.params);
  CHECK(load_float_array(path, "logits", {B, c.num_classes}) == logits);
  CHECK_CONTAINS(error_of([&] { load_float_array(path, "/logits", {B, c.num_classes + 1}); }),
                 "dataset /logits has shape [3, 5], expected [3, 6]");

  fs::remove(path);
  write_twin("vit_tiny", labels[0]);
  CHECK_CONTAINS(error_of([&] { load_twin_reference(path, L); }), "holds model 'vit_tiny'");
  fs::remove(path);
  write_twin("vit_micro", 5);
  CHECK_CONTAINS(error_of([&] { load_twin_reference(path, L); }), "label 5 at index 0");
}

TEST_CASE("weights: a tensor holding NaN or Inf is refused at load, naming it and the element", "[weights]") {
  TempDir dir("vitddp_weights_");
  const ParamLayout L = make_param_layout(vit_config("vit_micro"));
  const std::string path = dir.file("nan.h5");
  std::vector<float> p = random_params(L, 3);
  const ParamInfo* mlp = nullptr;
  for (const ParamInfo& q : L.params)
    if (q.name == "encoder.layers.encoder_layer_0.mlp.0.weight") mlp = &q;
  REQUIRE(mlp != nullptr);
  p[mlp->offset + 5] = std::numeric_limits<float>::quiet_NaN();
  save_weights(path, L, p.data(), false);
  std::vector<float> back(L.total);
  CHECK(error_of([&] { load_weights(path, L, back.data()); }) ==
        "HDF5 file '" + path + "': dataset /params/encoder.layers.encoder_layer_0.mlp.0.weight holds NaN (element 5 of " +
            std::to_string(mlp->numel) + ")");
  p[mlp->offset + 5] = 0;
  p[L.params[0].offset] = -std::numeric_limits<float>::infinity();
  save_weights(path, L, p.data(), true);
  CHECK(error_of([&] { load_weights(path, L, back.data()); }) ==
        "HDF5 file '" + path + "': dataset /params/" + L.params[0].name + " holds Inf (element 0 of " +
            std::to_string(L.params[0].numel) + ")");
}
