// Checked-call helpers for the HDF5 C API, shared by the results writer (src/io/results_h5.cpp) and
// the weights files (src/io/weights_io.cpp). Include only from .cpp files: it defines the macro
// H5_CHECK.
#pragma once
#include <hdf5.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace vitddp {
namespace h5 {

/// HDF5's own description of the failure that just happened: the outermost entry of its error
/// stack (what the API call failed to do) and the innermost (why), e.g. "unable to create dataset
/// (H5L__link_cb: name already exists)". Must be called before any other HDF5 API call, which
/// would clear the stack.
std::string error_text();

/// The errno of the file read or write that made the last HDF5 call fail (HDF5's POSIX driver
/// records it in its error stack), 0 when the failure was not one. Call before any other HDF5 call.
int error_errno();

/// Process-wide HDF5 settings of the binary; call before any other HDF5 call (first thing in a
/// run). (1) HDF5 does not print its error stack to stderr (H5Eset_auto2(H5E_DEFAULT, nullptr,
/// nullptr)): failures reach the user as one-line exceptions (check() below), also from calls
/// outside a QuietErrors scope. (2) HDF5 does not close what is still open at exit
/// (H5dont_atexit): every file is closed by its owner, and one whose close failed on a full disk
/// (HDF5 1.10 keeps it half-closed) would crash the library's shutdown (SIGSEGV in H5F__close_cb).
void prepare_library();

/// Points the file descriptor of `file` (an HDF5 file id of the default POSIX driver) at an empty
/// in-memory file (memfd_create): whatever HDF5 writes to it afterwards (at the close of its
/// datasets and of the file) succeeds and is lost; the file on disk keeps what was written before.
/// For the failure path of a writer only. Errors are ignored.
void discard_further_writes(hid_t file);

/// Closes `file` (an HDF5 file id of the default POSIX driver, open for writing) after a failure,
/// without writing anything more to it (discard_further_writes, then H5Fclose), so HDF5 releases
/// every resource of the file even on a full disk; what was written before stays as it was. Errors are ignored and the error stack cleared.
void close_discarding(hid_t file);

/// A file open for writing whose failure path releases it cleanly: close() flushes and closes it
/// (checked: throws std::runtime_error naming the path), the destructor of a file not closed
/// (an exception on the way) discards it with close_discarding.
class WriteFile {
 public:
  WriteFile(hid_t id, std::string path) : id_(id), path_(std::move(path)) {}
  ~WriteFile();
  WriteFile(const WriteFile&) = delete;
  WriteFile& operator=(const WriteFile&) = delete;
  hid_t get() const { return id_; }
  void close();

 private:
  hid_t id_;
  std::string path_;
};

/// The current UTC time in ISO 8601, e.g. "2026-11-30T04:51:22Z": the timestamp attributes of the
/// results, weights and checkpoint files.
std::string utc_now_iso8601();

/// Returns `result`, or throws std::runtime_error naming `call`, `file`:`line`, `object` (the HDF5
/// object or file the call was about) and error_text() when `result` is negative (HDF5's failure
/// convention for herr_t, hid_t and htri_t). When the file system failed (error_errno() != 0, e.g. a
/// full disk) the one line is "'<object>': <strerror> (HDF5 call <call> at <file>:<line>)".
template <class T>
T check(T result, const char* call, const std::string& object, const char* file, int line) {
  if (result < 0 && error_errno() != 0)  // the file system failed: its reason first, on one line
    throw std::runtime_error("'" + object + "': " + std::strerror(error_errno()) + " (HDF5 call " +
                             call + " at " + file + ":" + std::to_string(line) + ")");
  if (result < 0)
    throw std::runtime_error("HDF5 call failed at " + std::string(file) + ":" + std::to_string(line) + ": " + call +
                             " on '" + object + "': " + error_text());
  return result;
}

/// While alive, HDF5 does not print its error stack to stderr (the stack goes into our exception
/// messages instead); the previous handler is restored afterwards.
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

/// Owns one HDF5 identifier and closes it with the matching H5?close (errors on close ignored).
class Handle {
 public:
  Handle(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  ~Handle() {
    if (id_ >= 0) closer_(id_);
  }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, -1)), closer_(o.closer_) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle& operator=(Handle&&) = delete;
  hid_t get() const { return id_; }
  hid_t release() { return std::exchange(id_, -1); }

 private:
  hid_t id_;
  herr_t (*closer_)(hid_t);
};

/// A variable-length UTF-8 string type (for string attributes and datasets).
Handle vlen_string_type(const std::string& object);

/// Link creation properties that create missing intermediate groups ("a/b/c" creates a and b).
Handle intermediate_groups_lcpl(const std::string& object);

/// True when every component of the '/'-separated `name` exists below `loc` (H5Lexists fails,
/// rather than answering false, when an intermediate component is missing).
bool link_exists(hid_t loc, const std::string& name);

}  // namespace h5
}  // namespace vitddp

/// Checks an HDF5 call (negative return = failure) and throws std::runtime_error naming the call,
/// this file and line, `object` (the HDF5 object or file the call was about) and HDF5's reason.
#define H5_CHECK(call, object) ::vitddp::h5::check((call), #call, (object), __FILE__, __LINE__)
