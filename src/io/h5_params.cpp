#include "src/io/h5_params.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <type_traits>

namespace vitddp {
namespace h5 {

namespace fs = std::filesystem;

std::string shape_str(const std::vector<int64_t>& s) {
  if (s.empty()) return "[] (scalar)";
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string type_str(hid_t type) {
  const size_t bits = H5Tget_size(type) * 8;
  switch (H5Tget_class(type)) {
    case H5T_FLOAT: return "float" + std::to_string(bits);
    case H5T_INTEGER: return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_STRING: return "string";
    case H5T_ENUM: return "enum (e.g. numpy bool)";
    case H5T_COMPOUND: return "compound";
    default: return "a non-numeric HDF5 type";
  }
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("HDF5 file '" + path + "': " + what);
}

Handle open_readonly(const std::string& path) {
  std::error_code ec;
  if (path.empty()) throw std::runtime_error("cannot open an HDF5 file with an empty path");
  if (!fs::exists(path, ec)) throw std::runtime_error("cannot open HDF5 file '" + path + "': no such file");
  if (fs::is_directory(path, ec)) throw std::runtime_error("cannot open '" + path + "': it is a directory, not an HDF5 file");
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 == 0) throw std::runtime_error("'" + path + "' is not an HDF5 file");
  if (is_h5 < 0) throw std::runtime_error("cannot open '" + path + "' as an HDF5 file: " + h5::error_text());
  return Handle(H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path), H5Fclose);
}

Handle open_dataset(hid_t file, const std::string& path, const std::string& dset, const std::string& label) {
  if (!h5::link_exists(file, dset)) fail(path, label + " is missing");
  {
    Handle obj(H5_CHECK(H5Oopen(file, dset.c_str(), H5P_DEFAULT), path + ":" + dset), H5Oclose);
    if (H5Iget_type(obj.get()) != H5I_DATASET) fail(path, label + " is not a dataset");
  }
  return Handle(H5_CHECK(H5Dopen2(file, dset.c_str(), H5P_DEFAULT), path + ":" + dset), H5Dclose);
}

std::vector<int64_t> dataset_shape(hid_t dataset, const std::string& where) {
  Handle space(H5_CHECK(H5Dget_space(dataset), where), H5Sclose);
  const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space.get()), where);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0) H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), where);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

// Reads dataset `dset` of `file` into `out` after checking its shape (exactly `shape`) and element
// type (f32: 32-bit IEEE float, read as float; integer: any integer type, read as int32).
void read_checked(hid_t file, const std::string& path, const std::string& dset, const std::string& label,
                  const std::vector<int64_t>& shape, Elem elem, void* out) {
  const std::string where = path + ":" + dset;
  Handle d = open_dataset(file, path, dset, label);
  const std::vector<int64_t> got = dataset_shape(d.get(), where);
  if (got != shape) fail(path, label + " has shape " + shape_str(got) + ", expected " + shape_str(shape));
  Handle type(H5_CHECK(H5Dget_type(d.get()), where), H5Tclose);
  const H5T_class_t cls = H5_CHECK(H5Tget_class(type.get()), where);
  if (elem == Elem::f32 && !(cls == H5T_FLOAT && H5Tget_size(type.get()) == 4))
    fail(path, label + " is stored as " + type_str(type.get()) + ", expected float32");
  if (elem != Elem::f32 && cls != H5T_INTEGER)
    fail(path, label + " is stored as " + type_str(type.get()) + ", expected an integer type (int32)");
  size_t n = 1;
  for (int64_t s : shape) n *= static_cast<size_t>(s);
  if (n == 0) return;
  const hid_t mem = elem == Elem::f32 ? H5T_NATIVE_FLOAT : elem == Elem::i64 ? H5T_NATIVE_INT64 : H5T_NATIVE_INT32;
  H5_CHECK(H5Dread(d.get(), mem, H5S_ALL, H5S_ALL,
                   H5P_DEFAULT, out),
           where);
}

// Reads group `group` ("params", "grads", ...) of one dataset per parameter into flat buffer
// `flat` (layout.total floats, padding set to 0), strictly: no parameter missing, none extra.
void read_param_group(hid_t file, const std::string& path, const std::string& group, const ParamLayout& layout,
                      float* flat) {
  const std::string gpath = "/" + group;
  if (!h5::link_exists(file, gpath))
    fail(path, "no group " + gpath + " (expected one float32 dataset per parameter of " + layout.cfg.name + ")");
  std::fill(flat, flat + layout.total, 0.0f);
  for (const ParamInfo& p : layout.params) {
    const std::string dset = gpath + "/" + p.name;
    read_checked(file, path, dset, layout.cfg.name + " parameter '" + p.name + "' (dataset " + dset + ")", p.shape,
                 Elem::f32, flat + p.offset);
    size_t n = 1;
    for (int64_t d : p.shape) n *= static_cast<size_t>(d);
    const float* first = flat + p.offset;
    const float* bad = std::find_if(first, first + n, [](float v) { return !std::isfinite(v); });
    if (bad != first + n)
      fail(path, "dataset " + dset + " holds " + (std::isnan(*bad) ? "NaN" : "Inf") + " (element " +
                     std::to_string(bad - first) + " of " + std::to_string(n) + ")");
  }
  Handle g(H5_CHECK(H5Gopen2(file, gpath.c_str(), H5P_DEFAULT), path + ":" + gpath), H5Gclose);
  H5G_info_t info;
  H5_CHECK(H5Gget_info(g.get(), &info), path + ":" + gpath);
  if (info.nlinks == layout.params.size()) return;
  // Every parameter was found, so the others are unexpected (load_state_dict strict=True).
  std::vector<std::string> extra;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5_CHECK(
        H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT), path + ":" + gpath);
    std::string name(static_cast<size_t>(len) + 1, '\0');
    H5_CHECK(H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT),
             path + ":" + gpath);
    name.resize(static_cast<size_t>(len));
    bool known = false;
    for (const ParamInfo& p : layout.params) known = known || p.name == name;
    if (!known) extra.push_back(name);
  }
  std::string list;
  for (size_t i = 0; i < extra.size() && i < 5; ++i) list += (i ? ", '" : "'") + extra[i] + "'";
  if (extra.size() > 5) list += ", ... (" + std::to_string(extra.size()) + " in all)";
  fail(path, gpath + " holds entries that are not parameters of " + layout.cfg.name + ": " + list);
}

// Root attribute `name`: opened after checking it exists and holds one element.
static Handle open_scalar_attr(hid_t file, const std::string& path, const std::string& name) {
  const std::string where = path + ":/@" + name;
  if (H5_CHECK(H5Aexists(file, name.c_str()), where) <= 0) fail(path, "root attribute '" + name + "' is missing");
  Handle a(H5_CHECK(H5Aopen(file, name.c_str(), H5P_DEFAULT), where), H5Aclose);
  Handle space(H5_CHECK(H5Aget_space(a.get()), where), H5Sclose);
  if (H5_CHECK(H5Sget_simple_extent_npoints(space.get()), where) != 1)
    fail(path, "root attribute '" + name + "' is not a single value");
  return a;
}

std::string read_string_attr(hid_t file, const std::string& path, const std::string& name) {
  const std::string where = path + ":/@" + name;
  Handle a = open_scalar_attr(file, path, name);
  Handle type(H5_CHECK(H5Aget_type(a.get()), where), H5Tclose);
  if (H5_CHECK(H5Tget_class(type.get()), where) != H5T_STRING)
    fail(path, "root attribute '" + name + "' is " + type_str(type.get()) + ", expected a string");
  // Read with the stored type itself (same character set, so no conversion is needed).
  Handle mem(H5_CHECK(H5Tcopy(type.get()), where), H5Tclose);
  if (H5_CHECK(H5Tis_variable_str(type.get()), where) > 0) {
    char* s = nullptr;
    H5_CHECK(H5Aread(a.get(), mem.get(), &s), where);
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  std::string buf(H5Tget_size(type.get()), '\0');
  if (!buf.empty()) H5_CHECK(H5Aread(a.get(), mem.get(), buf.data()), where);
  buf.resize(std::strlen(buf.c_str()));
  while (!buf.empty() && buf.back() == ' ') buf.pop_back();
  return buf;
}

template <class T>
T read_number_attr(hid_t file, const std::string& path, const std::string& name) {
  const std::string where = path + ":/@" + name;
  Handle a = open_scalar_attr(file, path, name);
  Handle type(H5_CHECK(H5Aget_type(a.get()), where), H5Tclose);
  const H5T_class_t cls = H5_CHECK(H5Tget_class(type.get()), where);
  if (cls != H5T_INTEGER && cls != H5T_FLOAT)
    fail(path, "root attribute '" + name + "' is " + type_str(type.get()) + ", expected a number");
  T v{};
  H5_CHECK(H5Aread(a.get(), std::is_same<T, double>::value ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64, &v), where);
  return v;
}

static void write_attr(hid_t obj, const std::string& where, const std::string& name, hid_t type, const void* value) {
  Handle space(H5_CHECK(H5Screate(H5S_SCALAR), where), H5Sclose);
  Handle a(H5_CHECK(H5Acreate2(obj, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), where), H5Aclose);
  H5_CHECK(H5Awrite(a.get(), type, value), where);
}

void write_string_attr(hid_t obj, const std::string& where, const std::string& name, const std::string& value) {
  Handle t = h5::vlen_string_type(where);
  const char* p = value.c_str();
  write_attr(obj, where, name, t.get(), &p);
}

void write_int_attr(hid_t obj, const std::string& where, const std::string& name, int64_t value) {
  write_attr(obj, where, name, H5T_NATIVE_INT64, &value);
}

void write_double_attr(hid_t obj, const std::string& where, const std::string& name, double value) {
  write_attr(obj, where, name, H5T_NATIVE_DOUBLE, &value);
}

void write_param_group(hid_t file, const std::string& path, const std::string& group, const ParamLayout& layout,
                       const float* flat) {
  Handle lcpl = intermediate_groups_lcpl(path + ":/" + group);
  Handle g(H5_CHECK(H5Gcreate2(file, group.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), path + ":/" + group),
           H5Gclose);
  for (const ParamInfo& p : layout.params) {
    const std::string where = path + ":/" + group + "/" + p.name;
    const std::vector<hsize_t> dims(p.shape.begin(), p.shape.end());
    Handle space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), where), H5Sclose);
    Handle d(H5_CHECK(H5Dcreate2(g.get(), p.name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                 H5P_DEFAULT),
                      where),
             H5Dclose);
    if (p.numel > 0)
      H5_CHECK(H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, flat + p.offset), where);
  }
}

[[noreturn]] void fail_errno(const std::string& what, const std::string& path) {
  const int e = errno;
  throw std::runtime_error(what + " '" + path + "': " + std::strerror(e));
}

// Flushes a file's (or directory's) data and metadata to stable storage.
void fsync_path(const std::string& path, bool directory, const std::string& who) {
  const int fd = ::open(path.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0));
  if (fd < 0) fail_errno(who + ": cannot open for fsync", path);
  // Some file systems cannot fsync a directory (EINVAL); the rename itself is then all we get.
  if (::fsync(fd) != 0 && !(directory && errno == EINVAL)) {
    const int e = errno;
    ::close(fd);
    errno = e;
    fail_errno(who + ": fsync failed on", path);
  }
  ::close(fd);
}

template int64_t read_number_attr<int64_t>(hid_t, const std::string&, const std::string&);
template double read_number_attr<double>(hid_t, const std::string&, const std::string&);

}  // namespace h5
}  // namespace vitddp
