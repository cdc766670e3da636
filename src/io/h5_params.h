// Building blocks of the HDF5 files that hold per-parameter tensors (weights files,
// src/io/weights_io.h; checkpoints, src/io/checkpoint.h): checked reads of datasets and root attributes,
// groups of one dataset per parameter under torchvision's names, scalar attributes, fsync.
// Include only from .cpp files (HDF5 C API types; see src/io/h5_util.h).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "src/io/h5_util.h"

namespace vitddp {
namespace h5 {

/// "[3, 4]" ("[] (scalar)" for an empty shape), for error messages.
std::string shape_str(const std::vector<int64_t>& s);

/// "float32", "int64", "uint8", "string", ... of an HDF5 datatype, for error messages.
std::string type_str(hid_t type);

/// Throws std::runtime_error("HDF5 file '<path>': <what>").
[[noreturn]] void fail(const std::string& path, const std::string& what);

/// Throws std::runtime_error("<what> '<path>': <strerror(errno)>").
[[noreturn]] void fail_errno(const std::string& what, const std::string& path);

/// Opens `path` read-only after checking that it exists and is an HDF5 file; throws
/// std::runtime_error naming the path otherwise. Call under QuietErrors.
Handle open_readonly(const std::string& path);

/// Opens dataset `dset` ("/a/b") of `file`, or fails naming `label` (e.g. "parameter 'x'
/// (dataset /params/x)") when it is missing or not a dataset.
Handle open_dataset(hid_t file, const std::string& path, const std::string& dset, const std::string& label);

/// The dimensions of an open dataset ({} for a scalar).
std::vector<int64_t> dataset_shape(hid_t dataset, const std::string& where);

/// Element kinds read_checked accepts.
enum class Elem {
  f32,      ///< 32-bit IEEE float, read as float
  integer,  ///< any integer type, read as int32
  i64,      ///< any integer type, read as int64
};

/// Reads dataset `dset` of `file` into `out` after checking its shape (exactly `shape`) and
/// element type (`elem`); fails naming `label` and both shapes / the stored type otherwise.
void read_checked(hid_t file, const std::string& path, const std::string& dset, const std::string& label,
                  const std::vector<int64_t>& shape, Elem elem, void* out);

/// Reads group `group` ("params", "optimizer/exp_avg", ...) holding one float32 dataset per
/// parameter of `layout` (torchvision name and shape) into flat buffer `flat` (layout.total floats,
/// padding set to 0), strictly as torch's load_state_dict(strict=True): none missing, none extra,
/// each exactly its shape and float32, and every element finite (a NaN or Inf fails naming the
/// dataset and the element's index). Fails naming the file, group and parameter.
void read_param_group(hid_t file, const std::string& path, const std::string& group, const ParamLayout& layout,
                      float* flat);

/// Creates group `group` (intermediate groups included) with one float32 dataset per parameter of
/// `layout` (torchvision name, shape, row-major) taken from flat buffer `flat` (layout.total
/// floats, ParamLayout offsets). `path` names the file in errors.
void write_param_group(hid_t file, const std::string& path, const std::string& group, const ParamLayout& layout,
                       const float* flat);

/// Root attribute `name`: a string (variable- or fixed-length); fails when missing or not a string.
std::string read_string_attr(hid_t file, const std::string& path, const std::string& name);

/// Root attribute `name` as T (int64_t or double); fails when missing, not one value or not a number.
template <class T>
T read_number_attr(hid_t file, const std::string& path, const std::string& name);

/// Scalar attribute `name` on object `obj` (`where` names it in errors): variable-length UTF-8
/// string, int64 or float64.
void write_string_attr(hid_t obj, const std::string& where, const std::string& name, const std::string& value);
void write_int_attr(hid_t obj, const std::string& where, const std::string& name, int64_t value);
void write_double_attr(hid_t obj, const std::string& where, const std::string& name, double value);

/// Flushes a file's (or directory's) data and metadata to stable storage (fsync(2)); a directory
/// that cannot be fsync'd (EINVAL) is accepted. Errors are std::runtime_error starting "<who>: ".
void fsync_path(const std::string& path, bool directory, const std::string& who);

}  // namespace h5
}  // namespace vitddp
