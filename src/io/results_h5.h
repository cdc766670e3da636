// The HDF5 results file of one run, written by rank 0 only (the other ranks send their rows to it
// over MPI). Layout and conventions: docs/schema.md. HDF5 C API, serial library; not
// thread-safe: use one ResultsFile from one thread.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace vitddp {

/// Element type of a dataset in the results file.
enum class H5Dtype {
  f64,  ///< IEEE float64, little-endian (H5T_IEEE_F64LE)
  i64,  ///< signed 64-bit integer, little-endian (H5T_STD_I64LE)
};

/// One open results file. Every HDF5 call is checked; a failure throws std::runtime_error naming
/// the source file and line, the HDF5 object (dataset / attribute name, path) and HDF5's own error
/// description. Move-only; the destructor closes the file (errors there are printed, not thrown;
/// not printed while an exception unwinds the stack, which reports the failure itself).
///
/// Crash behaviour: writes go straight to the final path (no temporary file), so a run that is
/// killed keeps everything up to its last flush(). Written with the HDF5 1.8 file format
/// (superblock v2, no SWMR), which a reader opens after a crash without `h5clear`.
class ResultsFile {
 public:
  /// Creates the file at `path`. Throws std::runtime_error naming the path and the reason when the
  /// parent directory is missing, not a directory or not writable (output_directory_problem), when `path`
  /// is a directory, when it exists and `overwrite` is false (HDF5 H5F_ACC_EXCL), or when HDF5
  /// cannot create it. With `overwrite` an existing file is truncated (H5F_ACC_TRUNC). The new
  /// file is flushed at once, so a run killed before its first step leaves a readable empty file.
  static ResultsFile create(const std::string& path, bool overwrite);

  /// Why create(path, overwrite) would refuse before HDF5 is asked ("" when it would go ahead):
  /// each reason listed for create() except HDF5's own, and, with `overwrite`, an existing file another process
  /// holds the HDF5 write lock on (flock(2) probe). Creates and modifies nothing (the probe opens
  /// the file read-only).
  static std::string create_problem(const std::string& path, bool overwrite);
  /// create_problem, then, where it finds none, a trial of what create will do, for the start-up
  /// checks of the one process that creates the file: an absent `path` is created as an HDF5 file
  /// with create's settings (H5F_ACC_EXCL) and removed at once (a name over the file system's
  /// limit, /proc, a file system without the HDF5 file locking); an existing one, with `overwrite`,
  /// must be writable (truncation opens it for writing). "" when create would succeed as far as
  /// that tells.
  static std::string create_trial_problem(const std::string& path, bool overwrite);

  ResultsFile(ResultsFile&& other) noexcept;
  ResultsFile& operator=(ResultsFile&& other) noexcept;
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;
  ~ResultsFile();

  /// Root attribute `name` (replaced if it exists). Strings are variable-length UTF-8; a vector
  /// becomes a 1-D attribute of its length (an empty vector a 1-D attribute of length 0).
  /// Integers are stored as int64, floating point as float64. Throws std::runtime_error when the
  /// file is closed or HDF5 fails.
  void set_attr(const std::string& name, const std::string& value);
  void set_attr(const std::string& name, const char* value);
  void set_attr(const std::string& name, int64_t value);
  void set_attr(const std::string& name, double value);
  void set_attr(const std::string& name, const std::vector<std::string>& value);
  void set_attr(const std::string& name, const std::vector<int64_t>& value);
  void set_attr(const std::string& name, const std::vector<double>& value);
  /// Any other integer type (int, unsigned, size_t, bool): stored as int64. Throws
  /// std::out_of_range when an unsigned value does not fit in int64.
  template <class T, std::enable_if_t<std::is_integral<T>::value && !std::is_same<T, int64_t>::value, int> = 0>
  void set_attr(const std::string& name, T value) {
    if (std::is_unsigned<T>::value && static_cast<uint64_t>(value) > static_cast<uint64_t>(INT64_MAX))
      throw std::out_of_range("ResultsFile::set_attr: attribute '" + name + "' does not fit in int64");
    set_attr(name, static_cast<int64_t>(value));
  }

  /// Creates an extendible per-step dataset `name` ('/'-separated; missing groups are created)
  /// with shape [ranks, 0] (buckets == 0) or [ranks, 0, buckets], chunked, unlimited along the
  /// step axis (axis 1), fill value 0. Attributes: "units" (e.g. "s", "bytes", "1"), "description",
  /// and "axes" ("rank,step", or "rank,step," + `third_axis`: "rank,step,bucket", "rank,step,group"
  /// for the gradient-ready groups). Throws std::invalid_argument when ranks < 1, buckets < 0, or
  /// the series already exists; std::runtime_error on HDF5 failure.
  void create_series(const std::string& name, const std::string& units, const std::string& description,
                     int64_t ranks, int64_t buckets, H5Dtype dtype, const std::string& third_axis = "bucket");

  /// Appends one step to series `name`: the step axis grows by one and `values` (row-major
  /// [ranks] or [ranks][buckets], i.e. values[r * buckets + b]) fill the new slice. For an i64
  /// series each double must be an integer within int64 range (else std::invalid_argument).
  /// The int64 overload converts to float64 for an f64 series. Throws std::invalid_argument for an
  /// unknown series (or a vector of the wrong size), std::runtime_error on HDF5 failure.
  void append_step(const std::string& name, const double* values);
  void append_step(const std::string& name, const int64_t* values);
  void append_step(const std::string& name, const std::vector<double>& values);
  void append_step(const std::string& name, const std::vector<int64_t>& values);

  /// Number of steps appended so far to series `name` (std::invalid_argument if unknown).
  int64_t series_steps(const std::string& name) const;

  /// Fixed-size dataset `name` of the given shape (row-major `data`, product(shape) elements,
  /// shape.size() >= 1), with "units" and "description" attributes. Missing groups are created.
  /// Throws std::invalid_argument for an empty shape; std::runtime_error if `name` exists or HDF5
  /// fails.
  void write_array(const std::string& name, const std::vector<uint64_t>& shape, const double* data,
                   const std::string& units, const std::string& description);
  void write_array(const std::string& name, const std::vector<uint64_t>& shape, const int64_t* data,
                   const std::string& units, const std::string& description);

  /// 1-D dataset of variable-length UTF-8 strings [values.size()] with "units" (use "" for text)
  /// and "description" attributes. Errors as write_array.
  void write_strings(const std::string& name, const std::vector<std::string>& values,
                     const std::string& units, const std::string& description);

  /// Scalar float64 dataset /summary/<name> with "units" and "description" attributes; written
  /// again (value and attributes replaced) when it exists. Throws std::runtime_error on HDF5
  /// failure.
  void write_summary(const std::string& name, double value, const std::string& units,
                     const std::string& description = "");

  /// Writes every buffered object and metadata to disk (H5Fflush, H5F_SCOPE_GLOBAL): after it
  /// returns, a crash keeps everything written so far.
  void flush();

  /// Flushes, then closes every dataset and the file. Idempotent. When the flush fails (a full
  /// disk, an I/O error) the rest of HDF5's writes are discarded (h5::discard_further_writes) so
  /// that everything is released cleanly, and std::runtime_error("cannot write '<path>':
  /// <strerror>") is thrown: the file keeps what the last successful flush() wrote. Throws
  /// std::runtime_error on any other HDF5 failure.
  void close();

  /// True until close() (false for a moved-from object).
  bool is_open() const { return file_ >= 0; }

  /// The path given to create().
  const std::string& path() const { return path_; }

 private:
  struct Series {
    int64_t dataset = -1;  // hid_t, kept open while the file is open
    int64_t ranks = 0, buckets = 0, steps = 0;
    H5Dtype dtype = H5Dtype::f64;
    /// Values in one step of the series: ranks x max(buckets, 1).
    size_t per_step() const { return static_cast<size_t>(ranks * (buckets > 1 ? buckets : 1)); }
  };

  ResultsFile(std::string path, int64_t file);
  void require_open(const char* what) const;
  Series& series(const std::string& name);
  const Series& series(const std::string& name) const;
  template <class T>
  void append_raw(const std::string& name, Series& s, const T* values);
  /// Throws std::invalid_argument naming the series when `got` is not its per_step() count.
  void check_step_size(const std::string& name, size_t got) const;
  void write_attr(int64_t obj, const std::string& obj_name, const std::string& name, int64_t type,
                  int rank, uint64_t count, const void* data);
  /// Both write_array overloads: file and memory HDF5 types (hid_t) for `data`.
  void write_array_typed(const std::string& name, const std::vector<uint64_t>& shape, int64_t file_type,
                         int64_t mem_type, const void* data, const std::string& units, const std::string& description);

  std::string path_;
  int64_t file_ = -1;  // hid_t
  std::map<std::string, Series> series_;
};

}  // namespace vitddp
