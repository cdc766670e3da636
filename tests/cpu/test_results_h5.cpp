// ResultsFile: write, close, read back with the plain HDF5 C API (what a reader sees).
#include <fcntl.h>
#include <hdf5.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "src/io/results_h5.h"
#include "tests/catch.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using vitddp::H5Dtype;
using vitddp::ResultsFile;
using vitddp_test::message_of;
using vitddp_test::TempDir;

namespace {

// Reader side: thin checked wrappers over the C API.
struct H5Reader {
  hid_t file;
  explicit H5Reader(const std::string& path) {
    file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE(file >= 0);
  }
  ~H5Reader() { H5Fclose(file); }

  static std::string string_attr(hid_t obj, const char* name) {
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    REQUIRE(a >= 0);
    hid_t t = H5Aget_type(a);
    REQUIRE(H5Tis_variable_str(t) > 0);
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, H5T_CSET_UTF8);
    char* s = nullptr;
    REQUIRE(H5Aread(a, mt, &s) >= 0);
    std::string out(s);
    H5free_memory(s);
    H5Tclose(mt);
    H5Tclose(t);
    H5Aclose(a);
    return out;
  }
  static std::vector<std::string> string_vec_attr(hid_t obj, const char* name) {
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    REQUIRE(a >= 0);
    hid_t sp = H5Aget_space(a);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5T_VARIABLE);
    std::vector<char*> ptrs(n);
    if (n > 0) REQUIRE(H5Aread(a, mt, ptrs.data()) >= 0);
    std::vector<std::string> out;
    for (char* p : ptrs) {
      out.emplace_back(p);
      H5free_memory(p);
    }
    H5Tclose(mt);
    H5Sclose(sp);
    H5Aclose(a);
    return out;
  }
  template <class T>
  static std::vector<T> num_attr(hid_t obj, const char* name, hid_t mem_type, int expect_rank) {
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    REQUIRE(a >= 0);
    hid_t sp = H5Aget_space(a);
    REQUIRE(H5Sget_simple_extent_ndims(sp) == expect_rank);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    std::vector<T> out(n);
    if (n > 0) REQUIRE(H5Aread(a, mem_type, out.data()) >= 0);
    H5Sclose(sp);
    H5Aclose(a);
    return out;
  }
  static H5T_class_t attr_class(hid_t obj, const char* name) {
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    H5T_class_t c = H5Tget_class(t);
    H5Tclose(t);
    H5Aclose(a);
    return c;
  }
  std::vector<hsize_t> dims(const char* name) const {
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    REQUIRE(d >= 0);
    hid_t sp = H5Dget_space(d);
    std::vector<hsize_t> out(H5Sget_simple_extent_ndims(sp));
    H5Sget_simple_extent_dims(sp, out.data(), nullptr);
    H5Sclose(sp);
    H5Dclose(d);
    return out;
  }
  template <class T>
  std::vector<T> read(const char* name, hid_t mem_type) const {
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    REQUIRE(d >= 0);
    hid_t sp = H5Dget_space(d);
    std::vector<T> out(H5Sget_simple_extent_npoints(sp));
    if (!out.empty()) REQUIRE(H5Dread(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0);
    H5Sclose(sp);
    H5Dclose(d);
    return out;
  }
  H5T_class_t dclass(const char* name) const {
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    hid_t t = H5Dget_type(d);
    H5T_class_t c = H5Tget_class(t);
    H5Tclose(t);
    H5Dclose(d);
    return c;
  }
  std::string dattr(const char* dataset, const char* attr) const {
    hid_t d = H5Dopen2(file, dataset, H5P_DEFAULT);
    REQUIRE(d >= 0);
    std::string s = string_attr(d, attr);
    H5Dclose(d);
    return s;
  }
};

}  // namespace

TEST_CASE("ResultsFile writes attributes, series, arrays and summary that read back exactly", "[h5]") {
  TempDir dir("vitddp_h5_");
  const std::string path = dir.file("run.h5");
  {
    ResultsFile f = ResultsFile::create(path, false);
    REQUIRE(f.is_open());
    f.set_attr("model", std::string("vit_l_32"));
    f.set_attr("command_line", "vitddp --model vit_l_32");
    f.set_attr("world_size", int64_t{4});
    f.set_attr("local_int", 7);             // int -> int64 through the template
    f.set_attr("param_count", size_t{305510632});
    f.set_attr("lr", 0.125);
    f.set_attr("hosts", std::vector<std::string>{"node-a", "node-b", "ünïcode"});
    f.set_attr("ranks_per_host", std::vector<int64_t>{2, 2});
    f.set_attr("empty_list", std::vector<double>{});
    f.set_attr("lr", 0.25);  // replaced, not duplicated
    std::vector<double> big(20000);
    for (size_t i = 0; i < big.size(); ++i) big[i] = 0.5 * i;
    f.set_attr("big", big);  // > 64 KiB: needs dense attribute storage

    f.create_series("timing/forward", "s", "forward time per step", 3, 0, H5Dtype::f64);
    f.create_series("timing/bucket_bytes", "bytes", "bytes per bucket", 3, 4, H5Dtype::i64);
    f.create_series("loss", "1", "training loss", 3, 0, H5Dtype::f64);
    for (int step = 0; step < 5; ++step) {
      std::vector<double> fw = {step + 0.1 * 1, step + 0.1 * 2, step + 0.1 * 3};
      f.append_step("timing/forward", fw.data());
      std::vector<int64_t> bytes(12);
      for (int r = 0; r < 3; ++r)
        for (int b = 0; b < 4; ++b) bytes[r * 4 + b] = 1000000000000LL * step + 100 * r + b;
      f.append_step("timing/bucket_bytes", bytes);
      f.append_step("loss", std::vector<double>{1.0 / (step + 1), 2.0, 3.0});
    }
    CHECK(f.series_steps("timing/forward") == 5);
    CHECK_THROWS_AS(f.append_step("nope", std::vector<double>{1, 2, 3}), std::invalid_argument);
    CHECK_THROWS_AS(f.append_step("loss", std::vector<double>{1, 2}), std::invalid_argument);
    CHECK_THROWS_AS(f.append_step("timing/bucket_bytes", std::vector<double>(12, 0.5)), std::invalid_argument);
    CHECK_THROWS_AS(f.create_series("loss", "1", "again", 3, 0, H5Dtype::f64), std::invalid_argument);
    CHECK(f.series_steps("timing/bucket_bytes") == 5);  // the failed append changed nothing

    const std::vector<int64_t> bucket_bytes = {1048576, 26214400, 26214400};
    f.write_array("buckets/bytes", {3}, bucket_bytes.data(), "bytes", "bucket index -> bytes");
    const std::vector<double> grid = {1, 2, 3, 4, 5, 6};
    f.write_array("grid", {2, 3}, grid.data(), "s", "a 2x3 table");
    f.write_strings("buckets/first_param", {"heads.head.weight", "encoder.layers.23.mlp.3.bias", ""}, "",
                    "first parameter of each bucket");
    CHECK_THROWS_AS(f.write_array("grid", {2, 3}, grid.data(), "s", "exists"), std::runtime_error);
    f.write_summary("images_per_s", 1234.5, "images/s", "throughput");
    f.write_summary("mfu", 0.1, "1");
    f.write_summary("mfu", 0.42, "1", "model FLOP utilisation");  // rewritten
    f.flush();
    f.close();
    CHECK_FALSE(f.is_open());
    f.close();  // idempotent
    CHECK_THROWS_AS(f.set_attr("late", 1.0), std::runtime_error);
  }

  H5Reader r(path);
  CHECK(H5Reader::string_attr(r.file, "model") == "vit_l_32");
  CHECK(H5Reader::string_attr(r.file, "command_line") == "vitddp --model vit_l_32");
  CHECK(H5Reader::num_attr<int64_t>(r.file, "world_size", H5T_NATIVE_INT64, 0) == std::vector<int64_t>{4});
  CHECK(H5Reader::attr_class(r.file, "world_size") == H5T_INTEGER);
  CHECK(H5Reader::num_attr<int64_t>(r.file, "local_int", H5T_NATIVE_INT64, 0) == std::vector<int64_t>{7});
  CHECK(H5Reader::num_attr<int64_t>(r.file, "param_count", H5T_NATIVE_INT64, 0) == std::vector<int64_t>{305510632});
  CHECK(H5Reader::attr_class(r.file, "lr") == H5T_FLOAT);
  CHECK(H5Reader::num_attr<double>(r.file, "lr", H5T_NATIVE_DOUBLE, 0) == std::vector<double>{0.25});
  CHECK(H5Reader::string_vec_attr(r.file, "hosts") == std::vector<std::string>{"node-a", "node-b", "ünïcode"});
  CHECK(H5Reader::num_attr<int64_t>(r.file, "ranks_per_host", H5T_NATIVE_INT64, 1) == std::vector<int64_t>{2, 2});
  CHECK(H5Reader::num_attr<double>(r.file, "empty_list", H5T_NATIVE_DOUBLE, 1).empty());
  const auto big = H5Reader::num_attr<double>(r.file, "big", H5T_NATIVE_DOUBLE, 1);
  REQUIRE(big.size() == 20000);
  CHECK(big[19999] == 0.5 * 19999);

  CHECK(r.dims("timing/forward") == std::vector<hsize_t>{3, 5});
  CHECK(r.dclass("timing/forward") == H5T_FLOAT);
  const auto fw = r.read<double>("timing/forward", H5T_NATIVE_DOUBLE);
  for (int rank = 0; rank < 3; ++rank)
    for (int step = 0; step < 5; ++step) CHECK(fw[rank * 5 + step] == step + 0.1 * (rank + 1));
  CHECK(r.dattr("timing/forward", "units") == "s");
  CHECK(r.dattr("timing/forward", "description") == "forward time per step");
  CHECK(r.dattr("timing/forward", "axes") == "rank,step");

  CHECK(r.dims("timing/bucket_bytes") == std::vector<hsize_t>{3, 5, 4});
  CHECK(r.dclass("timing/bucket_bytes") == H5T_INTEGER);
  const auto bb = r.read<int64_t>("timing/bucket_bytes", H5T_NATIVE_INT64);
  for (int rank = 0; rank < 3; ++rank)
    for (int step = 0; step < 5; ++step)
      for (int b = 0; b < 4; ++b)
        CHECK(bb[(rank * 5 + step) * 4 + b] == 1000000000000LL * step + 100 * rank + b);
  CHECK(r.dattr("timing/bucket_bytes", "units") == "bytes");
  CHECK(r.dattr("timing/bucket_bytes", "axes") == "rank,step,bucket");

  const auto loss = r.read<double>("loss", H5T_NATIVE_DOUBLE);
  CHECK(loss[4] == 1.0 / 5);
  CHECK(loss[5] == 2.0);

  CHECK(r.dims("buckets/bytes") == std::vector<hsize_t>{3});
  CHECK(r.read<int64_t>("buckets/bytes", H5T_NATIVE_INT64) == std::vector<int64_t>{1048576, 26214400, 26214400});
  CHECK(r.dattr("buckets/bytes", "units") == "bytes");
  CHECK(r.dattr("buckets/bytes", "description") == "bucket index -> bytes");
  CHECK(r.dims("grid") == std::vector<hsize_t>{2, 3});
  CHECK(r.read<double>("grid", H5T_NATIVE_DOUBLE) == std::vector<double>{1, 2, 3, 4, 5, 6});
  {
    hid_t d = H5Dopen2(r.file, "buckets/first_param", H5P_DEFAULT);
    REQUIRE(d >= 0);
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5T_VARIABLE);
    std::vector<char*> p(3);
    REQUIRE(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, p.data()) >= 0);
    CHECK(std::string(p[0]) == "heads.head.weight");
    CHECK(std::string(p[1]) == "encoder.layers.23.mlp.3.bias");
    CHECK(std::string(p[2]).empty());
    for (char* s : p) H5free_memory(s);
    CHECK(H5Reader::string_attr(d, "units").empty());
    H5Tclose(mt);
    H5Dclose(d);
  }
  CHECK(r.dims("summary/images_per_s").empty());  // scalar
  CHECK(r.read<double>("summary/images_per_s", H5T_NATIVE_DOUBLE) == std::vector<double>{1234.5});
  CHECK(r.dattr("summary/images_per_s", "units") == "images/s");
  CHECK(r.read<double>("summary/mfu", H5T_NATIVE_DOUBLE) == std::vector<double>{0.42});
  CHECK(r.dattr("summary/mfu", "description") == "model FLOP utilisation");
}

TEST_CASE("ResultsFile refuses to overwrite unless asked, and names a missing parent directory", "[h5]") {
  TempDir dir("vitddp_h5_");
  const std::string path = dir.file("run.h5");
  {
    ResultsFile f = ResultsFile::create(path, false);
    f.set_attr("first", int64_t{1});
  }
  const std::string refused = message_of([&] { ResultsFile::create(path, false); });
  CHECK(refused.find(path) != std::string::npos);
  CHECK(refused.find("refusing to overwrite") != std::string::npos);
  {
    H5Reader r(path);  // untouched by the refused attempt
    CHECK(H5Aexists(r.file, "first") > 0);
  }
  {
    ResultsFile f = ResultsFile::create(path, true);  // truncates
    f.set_attr("second", int64_t{2});
  }
  {
    H5Reader r(path);
    CHECK(H5Aexists(r.file, "first") == 0);
    CHECK(H5Aexists(r.file, "second") > 0);
  }
  const std::string missing = dir.file("no/such/dir/run.h5");
  const std::string msg = message_of([&] { ResultsFile::create(missing, true); });
  CHECK(msg.find(missing) != std::string::npos);
  CHECK(msg.find(dir.file("no/such/dir")) != std::string::npos);
  CHECK(msg.find("does not exist") != std::string::npos);
  // A directory given as the file: named as such, with or without overwrite, and left alone.
  for (bool overwrite : {false, true}) {
    const std::string d = message_of([&] { ResultsFile::create(dir.path.string(), overwrite); });
    CHECK(d.find("'" + dir.path.string() + "' is a directory") != std::string::npos);
  }
  CHECK(fs::is_directory(dir.path.string()));

  // A failing HDF5 call reports the object and HDF5's reason (here: a name that already exists).
  ResultsFile f = ResultsFile::create(dir.file("dup.h5"), false);
  const double x = 1;
  f.write_array("a", {1}, &x, "s", "");
  const std::string dup = message_of([&] { f.write_array("a", {1}, &x, "s", ""); });
  CHECK(dup.find("H5Dcreate2") != std::string::npos);
  CHECK(dup.find(dir.file("dup.h5") + ":a") != std::string::npos);
  CHECK(dup.find("results_h5.cpp:") != std::string::npos);
}

TEST_CASE("ResultsFile::create_problem: create's refusal, word for word, and nothing created or changed", "[h5]") {
  TempDir dir("vitddp_h5_");
  const std::string missing = dir.file("no/run.h5");
  CHECK(ResultsFile::create_problem(missing, false) == message_of([&] { ResultsFile::create(missing, false); }));
  CHECK(ResultsFile::create_problem(missing, false).find("does not exist") != std::string::npos);
  CHECK(!fs::exists(dir.file("no")));
  CHECK(ResultsFile::create_problem(dir.path.string(), true) ==
        message_of([&] { ResultsFile::create(dir.path.string(), true); }));
  const std::string path = dir.file("run.h5");
  CHECK(ResultsFile::create_problem(path, false).empty());  // a new file: create would go ahead
  CHECK(!fs::exists(path));
  {
    ResultsFile f = ResultsFile::create(path, false);
    f.set_attr("first", int64_t{1});
  }
  const auto size = fs::file_size(path);
  const auto mtime = fs::last_write_time(path);
  const std::string refused = ResultsFile::create_problem(path, false);
  CHECK(refused == message_of([&] { ResultsFile::create(path, false); }));
  CHECK(refused.find("refusing to overwrite existing file '" + path + "'") != std::string::npos);
  CHECK(ResultsFile::create_problem(path, true).empty());  // --overwrite: create would truncate it
  CHECK(fs::file_size(path) == size);
  CHECK(fs::last_write_time(path) == mtime);
  {
    H5Reader r(path);  // neither check truncated it
    CHECK(H5Aexists(r.file, "first") > 0);
  }
  // A file another writer holds the exclusive flock(2) on (as HDF5 does on a file open for
  // writing) is refused with --overwrite.
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  const std::string busy = ResultsFile::create_problem(path, true);
  CHECK(busy == "'" + path + "' is open for writing by another run (HDF5 file lock held); not overwriting it");
  CHECK(busy == message_of([&] { ResultsFile::create(path, true); }));
  ::close(fd);
  CHECK(fs::file_size(path) == size);
  CHECK(ResultsFile::create_problem(path, true).empty());  // the lock released
}

TEST_CASE("ResultsFile is on disk as soon as it is created: a run killed before its first step leaves a readable file",
          "[h5]") {
  TempDir dir("vitddp_h5_");
  const std::string path = dir.file("setup.h5");
  ResultsFile f = ResultsFile::create(path, false);
  // What a reader would find if the process died now: a byte copy of the file while it is open.
  const std::string copy = dir.file("copy.h5");
  fs::copy_file(path, copy);
  H5Reader r(copy);
  CHECK(r.file >= 0);
  CHECK(H5Aexists(r.file, "stop_reason") == 0);
}

TEST_CASE("ResultsFile is move-only and the moved-to object owns the file", "[h5]") {
  TempDir dir("vitddp_h5_");
  ResultsFile a = ResultsFile::create(dir.file("m.h5"), false);
  a.create_series("s", "s", "", 2, 0, H5Dtype::f64);
  ResultsFile b = std::move(a);
  CHECK_FALSE(a.is_open());
  b.append_step("s", std::vector<double>{1, 2});
  ResultsFile c = ResultsFile::create(dir.file("n.h5"), false);
  c = std::move(b);  // closes n.h5, takes m.h5
  c.append_step("s", std::vector<double>{3, 4});
  CHECK(c.path() == dir.file("m.h5"));
  c.close();
  H5Reader r(dir.file("m.h5"));
  CHECK(r.read<double>("s", H5T_NATIVE_DOUBLE) == std::vector<double>{1, 3, 2, 4});
}

TEST_CASE("A results file flushed but never closed (killed run) keeps the flushed rows", "[h5]") {
  TempDir dir("vitddp_h5_");
  const std::string path = dir.file("killed.h5");
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The "killed" run: no close, no destructor, no atexit handlers.
    try {
      ResultsFile f = ResultsFile::create(path, false);
      f.set_attr("model", "vit_tiny");
      f.create_series("timing/step", "s", "step time", 2, 0, H5Dtype::f64);
      f.create_series("timing/bucket_end", "s", "bucket all-reduce end", 2, 0 + 3, H5Dtype::f64);
      for (int step = 0; step < 7; ++step) {
        f.append_step("timing/step", std::vector<double>{step * 1.0, step * 10.0});
        f.append_step("timing/bucket_end", std::vector<double>(6, step + 0.5));
        f.flush();
      }
      _exit(0);
    } catch (...) {
      _exit(3);
    }
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);

  H5Reader r(path);
  CHECK(H5Reader::string_attr(r.file, "model") == "vit_tiny");
  CHECK(r.dims("timing/step") == std::vector<hsize_t>{2, 7});
  const auto v = r.read<double>("timing/step", H5T_NATIVE_DOUBLE);
  for (int step = 0; step < 7; ++step) {
    CHECK(v[step] == step * 1.0);
    CHECK(v[7 + step] == step * 10.0);
  }
  CHECK(r.dims("timing/bucket_end") == std::vector<hsize_t>{2, 7, 3});
  CHECK(r.read<double>("timing/bucket_end", H5T_NATIVE_DOUBLE).back() == 6.5);
}
