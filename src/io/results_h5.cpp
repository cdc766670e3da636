#include "src/io/results_h5.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <hdf5.h>

#include "src/io/h5_util.h"
#include "src/io/output_path.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <exception>
#include <functional>
#include <stdexcept>
#include <utility>

static_assert(sizeof(hid_t) == sizeof(int64_t), "ResultsFile stores hid_t in int64_t");

namespace vitddp {
namespace {

// Checked HDF5 calls, error text, RAII handles: src/io/h5_util.h (shared with src/io/weights_io.cpp).
using h5::Handle;
using h5::intermediate_groups_lcpl;
using h5::link_exists;
using h5::vlen_string_type;
using QuietH5Errors = h5::QuietErrors;

hid_t file_type(H5Dtype t) { return t == H5Dtype::f64 ? H5T_IEEE_F64LE : H5T_STD_I64LE; }

std::vector<const char*> c_strings(const std::vector<std::string>& v) {
  std::vector<const char*> out;
  out.reserve(v.size());
  for (const auto& s : v) out.push_back(s.c_str());
  return out;
}

}  // namespace

ResultsFile::ResultsFile(std::string path, int64_t file) : path_(std::move(path)), file_(file) {}

std::string ResultsFile::create_problem(const std::string& path, bool overwrite) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  if (path.empty()) return "cannot create a results file with an empty path";
  if (const std::string e = output_directory_problem("cannot create '" + path + "'", path); !e.empty()) return e;
  std::error_code ec;
  if (fs::is_directory(p, ec)) return "'" + path + "' is a directory; give the path of the results file to write";
  if (!overwrite && fs::exists(fs::symlink_status(p, ec)))
    return "refusing to overwrite existing file '" + path + "' (choose another path, or pass --overwrite to replace it)";
  if (overwrite && fs::exists(p, ec)) {
    // H5Fcreate(H5F_ACC_TRUNC) truncates before it takes its lock: a file another run is still
    // writing would be destroyed. HDF5 holds a flock() on files it has open for writing, so try
    // the same lock first and refuse if it is taken.
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
      const bool busy = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
      ::close(fd);  // also releases the probe lock
      if (busy) return "'" + path + "' is open for writing by another run (HDF5 file lock held); not overwriting it";
    }
  }
  return "";
}

std::string ResultsFile::create_trial_problem(const std::string& path, bool overwrite) {
  if (std::string e = create_problem(path, overwrite); !e.empty()) return e;
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (overwrite && ::access(path.c_str(), W_OK) != 0)
      return "'" + path + "' cannot be overwritten (" + std::strerror(errno) + ")";
    return "";
  }
  if (std::string e = creation_trial_problem(path); !e.empty()) return e;  // the plain reasons first
  std::string error;
  try {
    ResultsFile trial = create(path, false);
    trial.close();
  } catch (const std::exception& e) {
    error = e.what();
  }
  ::unlink(path.c_str());
  return error;
}

ResultsFile ResultsFile::create(const std::string& path, bool overwrite) {
  if (const std::string e = create_problem(path, overwrite); !e.empty()) throw std::runtime_error(e);
  QuietH5Errors quiet;
  // HDF5 1.8 format: dense attribute storage for large attributes, and no file-consistency flags
  // (those of the 1.10 v3 superblock would make a crashed file unreadable without h5clear).
  Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), path), H5Pclose);
  H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), path);
  const hid_t file = H5_CHECK(
      H5Fcreate(path.c_str(), overwrite ? H5F_ACC_TRUNC : H5F_ACC_EXCL, H5P_DEFAULT, fapl.get()), path);
  ResultsFile f(path, file);
  // On disk at once: a run killed before its first step leaves a readable, empty file rather than
  // a superblock HDF5 cannot open.
  f.flush();
  return f;
}

ResultsFile::ResultsFile(ResultsFile&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::exchange(other.file_, -1)),
      series_(std::move(other.series_)) {
  other.series_.clear();
}

ResultsFile& ResultsFile::operator=(ResultsFile&& other) noexcept {
  if (this != &other) {
    try {
      close();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ResultsFile: closing '%s' failed: %s\n", path_.c_str(), e.what());
    }
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, -1);
    series_ = std::move(other.series_);
    other.series_.clear();
  }
  return *this;
}

ResultsFile::~ResultsFile() {
  try {
    close();
  } catch (const std::exception& e) {
    if (std::uncaught_exceptions() > 0) return;  // unwinding: the error in flight is the one reported
    std::fprintf(stderr, "ResultsFile: closing '%s' failed: %s\n", path_.c_str(), e.what());
  }
}

void ResultsFile::require_open(const char* what) const {
  if (file_ < 0)
    throw std::runtime_error(std::string("ResultsFile::") + what + ": file '" + path_ + "' is not open");
}

void ResultsFile::write_attr(int64_t obj, const std::string& obj_name, const std::string& name,
                             int64_t type, int rank, uint64_t count, const void* data) {
  const std::string where = path_ + ":" + obj_name + "@" + name;
  if (H5_CHECK(H5Aexists(obj, name.c_str()), where) > 0) H5_CHECK(H5Adelete(obj, name.c_str()), where);
  const hsize_t dims[1] = {count};
  Handle space(rank == 0 ? H5_CHECK(H5Screate(H5S_SCALAR), where) : H5_CHECK(H5Screate_simple(1, dims, nullptr), where),
               H5Sclose);
  Handle attr(H5_CHECK(H5Acreate2(obj, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), where),
              H5Aclose);
  if (rank == 0 || count > 0) H5_CHECK(H5Awrite(attr.get(), type, data), where);
}

void ResultsFile::set_attr(const std::string& name, const std::string& value) {
  require_open("set_attr");
  QuietH5Errors quiet;
  Handle t = vlen_string_type(name);
  const char* p = value.c_str();
  write_attr(file_, "/", name, t.get(), 0, 1, &p);
}

void ResultsFile::set_attr(const std::string& name, const char* value) {
  set_attr(name, std::string(value ? value : ""));
}

void ResultsFile::set_attr(const std::string& name, int64_t value) {
  require_open("set_attr");
  QuietH5Errors quiet;
  write_attr(file_, "/", name, H5T_NATIVE_INT64, 0, 1, &value);
}

void ResultsFile::set_attr(const std::string& name, double value) {
  require_open("set_attr");
  QuietH5Errors quiet;
  write_attr(file_, "/", name, H5T_NATIVE_DOUBLE, 0, 1, &value);
}

void ResultsFile::set_attr(const std::string& name, const std::vector<std::string>& value) {
  require_open("set_attr");
  QuietH5Errors quiet;
  Handle t = vlen_string_type(name);
  const auto ptrs = c_strings(value);
  write_attr(file_, "/", name, t.get(), 1, value.size(), ptrs.data());
}

void ResultsFile::set_attr(const std::string& name, const std::vector<int64_t>& value) {
  require_open("set_attr");
  QuietH5Errors quiet;
  write_attr(file_, "/", name, H5T_NATIVE_INT64, 1, value.size(), value.data());
}

void ResultsFile::set_attr(const std::string& name, const std::vector<double>& value) {
  require_open("set_attr");
  QuietH5Errors quiet;
  write_attr(file_, "/", name, H5T_NATIVE_DOUBLE, 1, value.size(), value.data());
}

void ResultsFile::create_series(const std::string& name, const std::string& units,
                                const std::string& description, int64_t ranks, int64_t buckets,
                                H5Dtype dtype, const std::string& third_axis) {
  require_open("create_series");
  if (ranks < 1 || buckets < 0)
    throw std::invalid_argument("ResultsFile::create_series: '" + name + "' needs ranks >= 1 and buckets >= 0, got ranks=" +
                                std::to_string(ranks) + " buckets=" + std::to_string(buckets));
  if (series_.count(name))
    throw std::invalid_argument("ResultsFile::create_series: series '" + name + "' already exists");
  QuietH5Errors quiet;
  const std::string where = path_ + ":" + name;
  const int rank = buckets == 0 ? 2 : 3;
  const int64_t per_step = ranks * std::max<int64_t>(buckets, 1);
  // About 8 KiB per chunk, at least one step and at most 1024 steps: a short run's file stays
  // small, and flushing every step rewrites little (no compression filter: deflating every
  // touched chunk at each flush cost about 3.5 ms per step for vit_l_32's 38 buckets on 2 ranks).
  const hsize_t chunk_steps = static_cast<hsize_t>(std::clamp<int64_t>(8192 / (per_step * 8), 1, 1024));
  const hsize_t dims[3] = {static_cast<hsize_t>(ranks), 0, static_cast<hsize_t>(buckets)};
  const hsize_t maxdims[3] = {static_cast<hsize_t>(ranks), H5S_UNLIMITED, static_cast<hsize_t>(buckets)};
  const hsize_t chunk[3] = {static_cast<hsize_t>(ranks), chunk_steps, static_cast<hsize_t>(buckets)};
  Handle space(H5_CHECK(H5Screate_simple(rank, dims, maxdims), where), H5Sclose);
  Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), where), H5Pclose);
  H5_CHECK(H5Pset_chunk(dcpl.get(), rank, chunk), where);
  if (dtype == H5Dtype::f64) {
    const double zero = 0;
    H5_CHECK(H5Pset_fill_value(dcpl.get(), H5T_NATIVE_DOUBLE, &zero), where);
  } else {
    const int64_t zero = 0;
    H5_CHECK(H5Pset_fill_value(dcpl.get(), H5T_NATIVE_INT64, &zero), where);
  }
  Handle lcpl = intermediate_groups_lcpl(where);
  Handle dset(H5_CHECK(H5Dcreate2(file_, name.c_str(), file_type(dtype), space.get(), lcpl.get(), dcpl.get(),
                                  H5P_DEFAULT),
                       where),
              H5Dclose);
  Handle str = vlen_string_type(where);
  for (const auto& [key, value] : {std::pair<const char*, std::string>{"units", units},
                                   {"description", description},
                                   {"axes", buckets == 0 ? "rank,step" : "rank,step," + third_axis}}) {
    const char* p = value.c_str();
    write_attr(dset.get(), name, key, str.get(), 0, 1, &p);
  }
  Series s;
  s.ranks = ranks;
  s.buckets = buckets;
  s.dtype = dtype;
  s.dataset = dset.release();
  series_.emplace(name, s);
}

ResultsFile::Series& ResultsFile::series(const std::string& name) {
  auto it = series_.find(name);
  if (it == series_.end())
    throw std::invalid_argument("ResultsFile: no series '" + name + "' in '" + path_ + "' (create_series first)");
  return it->second;
}

const ResultsFile::Series& ResultsFile::series(const std::string& name) const {
  return const_cast<ResultsFile*>(this)->series(name);
}

int64_t ResultsFile::series_steps(const std::string& name) const { return series(name).steps; }

template <class T>
void ResultsFile::append_raw(const std::string& name, Series& s, const T* values) {
  const std::string where = path_ + ":" + name;
  const int rank = s.buckets == 0 ? 2 : 3;
  const hsize_t new_dims[3] = {static_cast<hsize_t>(s.ranks), static_cast<hsize_t>(s.steps + 1),
                               static_cast<hsize_t>(s.buckets)};
  H5_CHECK(H5Dset_extent(s.dataset, new_dims), where);
  Handle file_space(H5_CHECK(H5Dget_space(s.dataset), where), H5Sclose);
  const hsize_t start[3] = {0, static_cast<hsize_t>(s.steps), 0};
  const hsize_t count[3] = {static_cast<hsize_t>(s.ranks), 1, static_cast<hsize_t>(s.buckets)};
  H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), where);
  Handle mem_space(H5_CHECK(H5Screate_simple(rank, count, nullptr), where), H5Sclose);
  const hid_t mem_type = std::is_same<T, double>::value ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
  H5_CHECK(H5Dwrite(s.dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, values), where);
  ++s.steps;
}

void ResultsFile::append_step(const std::string& name, const double* values) {
  require_open("append_step");
  Series& s = series(name);
  QuietH5Errors quiet;
  if (s.dtype == H5Dtype::f64) return append_raw(name, s, values);
  const size_t n = s.per_step();
  std::vector<int64_t> ints(n);
  for (size_t i = 0; i < n; ++i) {
    const double v = values[i];
    // 2^63 is exact in double; int64 holds [-2^63, 2^63).
    if (!(v == std::trunc(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0))
      throw std::invalid_argument("ResultsFile::append_step: int64 series '" + name + "' got non-integer value " +
                                  std::to_string(v) + " at index " + std::to_string(i));
    ints[i] = static_cast<int64_t>(v);
  }
  append_raw(name, s, ints.data());
}

void ResultsFile::append_step(const std::string& name, const int64_t* values) {
  require_open("append_step");
  Series& s = series(name);
  QuietH5Errors quiet;
  if (s.dtype == H5Dtype::i64) return append_raw(name, s, values);
  std::vector<double> dbl(values, values + s.per_step());
  append_raw(name, s, dbl.data());
}

void ResultsFile::check_step_size(const std::string& name, size_t got) const {
  const size_t n = series(name).per_step();
  if (got != n)
    throw std::invalid_argument("ResultsFile::append_step: series '" + name + "' takes " + std::to_string(n) +
                                " values per step, got " + std::to_string(got));
}

void ResultsFile::append_step(const std::string& name, const std::vector<double>& values) {
  check_step_size(name, values.size());
  append_step(name, values.data());
}

void ResultsFile::append_step(const std::string& name, const std::vector<int64_t>& values) {
  check_step_size(name, values.size());
  append_step(name, values.data());
}

namespace {

// Creates a fixed-size dataset and writes `data` (memory type `mem_type`) plus units/description.
void write_fixed(hid_t file, const std::string& where, const std::string& name, const std::vector<uint64_t>& shape,
                 hid_t file_type_id, hid_t mem_type, const void* data, const std::string& units,
                 const std::string& description,
                 const std::function<void(hid_t, const std::string&, const std::string&)>& set_str) {
  if (shape.empty() || shape.size() > 32)
    throw std::invalid_argument("ResultsFile: dataset '" + name + "' needs a shape of 1 to 32 dimensions");
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hsize_t total = 1;
  for (hsize_t d : dims) total *= d;
  Handle space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), where), H5Sclose);
  Handle lcpl = intermediate_groups_lcpl(where);
  Handle dset(H5_CHECK(H5Dcreate2(file, name.c_str(), file_type_id, space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
                       where),
              H5Dclose);
  if (total > 0) H5_CHECK(H5Dwrite(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), where);
  set_str(dset.get(), "units", units);
  set_str(dset.get(), "description", description);
}

}  // namespace

void ResultsFile::write_array_typed(const std::string& name, const std::vector<uint64_t>& shape, int64_t file_type,
                                    int64_t mem_type, const void* data, const std::string& units,
                                    const std::string& description) {
  require_open("write_array");
  QuietH5Errors quiet;
  const std::string where = path_ + ":" + name;
  Handle str = vlen_string_type(where);
  write_fixed(file_, where, name, shape, file_type, mem_type, data, units, description,
              [&](hid_t obj, const std::string& key, const std::string& value) {
                const char* p = value.c_str();
                write_attr(obj, name, key, str.get(), 0, 1, &p);
              });
}

void ResultsFile::write_array(const std::string& name, const std::vector<uint64_t>& shape, const double* data,
                              const std::string& units, const std::string& description) {
  write_array_typed(name, shape, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, data, units, description);
}

void ResultsFile::write_array(const std::string& name, const std::vector<uint64_t>& shape, const int64_t* data,
                              const std::string& units, const std::string& description) {
  write_array_typed(name, shape, H5T_STD_I64LE, H5T_NATIVE_INT64, data, units, description);
}

void ResultsFile::write_strings(const std::string& name, const std::vector<std::string>& values,
                                const std::string& units, const std::string& description) {
  require_open("write_strings");
  QuietH5Errors quiet;
  const std::string where = path_ + ":" + name;
  Handle str = vlen_string_type(where);
  const auto ptrs = c_strings(values);
  write_fixed(file_, where, name, {values.size()}, str.get(), str.get(), ptrs.data(), units, description,
              [&](hid_t obj, const std::string& key, const std::string& value) {
                const char* p = value.c_str();
                write_attr(obj, name, key, str.get(), 0, 1, &p);
              });
}

void ResultsFile::write_summary(const std::string& name, double value, const std::string& units,
                                const std::string& description) {
  require_open("write_summary");
  QuietH5Errors quiet;
  const std::string full = "summary/" + name;
  const std::string where = path_ + ":" + full;
  hid_t id;
  if (link_exists(file_, full)) {
    id = H5_CHECK(H5Dopen2(file_, full.c_str(), H5P_DEFAULT), where);
  } else {
    Handle space(H5_CHECK(H5Screate(H5S_SCALAR), where), H5Sclose);
    Handle lcpl = intermediate_groups_lcpl(where);
    id = H5_CHECK(H5Dcreate2(file_, full.c_str(), H5T_IEEE_F64LE, space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
                  where);
  }
  Handle dset(id, H5Dclose);
  H5_CHECK(H5Dwrite(dset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value), where);
  Handle str = vlen_string_type(where);
  for (const auto& [key, text] : {std::pair<const char*, const std::string&>{"units", units}, {"description", description}}) {
    const char* p = text.c_str();
    write_attr(dset.get(), full, key, str.get(), 0, 1, &p);
  }
}

void ResultsFile::flush() {
  require_open("flush");
  QuietH5Errors quiet;
  H5_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL), path_);
}

void ResultsFile::close() {
  if (file_ < 0) return;
  QuietH5Errors quiet;
  std::string first_error;
  // Everything to disk first. When that fails (a full disk), the rest of HDF5's writes are
  // discarded so that the datasets and the file are released cleanly; the file keeps what the
  // last successful flush wrote.
  if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) {
    const int e = h5::error_errno();
    first_error = "cannot write '" + path_ + "': " + (e ? std::string(std::strerror(e)) : h5::error_text());
    h5::discard_further_writes(file_);
  }
  for (auto& [name, s] : series_) {
    if (s.dataset >= 0 && H5Dclose(s.dataset) < 0 && first_error.empty())
      first_error = "H5Dclose on '" + path_ + ":" + name + "': " + h5::error_text();
    s.dataset = -1;
  }
  series_.clear();
  const hid_t file = std::exchange(file_, -1);
  if (H5Fclose(file) < 0 && first_error.empty()) first_error = "H5Fclose on '" + path_ + "': " + h5::error_text();
  if (!first_error.empty()) throw std::runtime_error(first_error.rfind("cannot write", 0) == 0 ? first_error : "ResultsFile::close: " + first_error);
}

}  // namespace vitddp
