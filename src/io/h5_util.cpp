#include "src/io/h5_util.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

namespace vitddp {
namespace h5 {

namespace {

/// `s` on one line: every run of newlines, tabs and spaces becomes one space.
std::string squeeze_spaces(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool space = c == '\n' || c == '\r' || c == '\t' || c == ' ';
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

/// The errno an entry of HDF5's POSIX driver reports ("..., errno = 28, error message = ..."), or 0.
int reported_errno(const std::string& desc) {
  const size_t at = desc.find("errno = ");
  return at == std::string::npos ? 0 : std::atoi(desc.c_str() + at + 8);
}

}  // namespace

std::string error_text() {
  struct Walk {
    std::vector<std::string> entries;
    int os_errno = 0;
  } walk;
  auto visit = [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
    Walk& w = *static_cast<Walk*>(out);
    const std::string desc = e->desc ? e->desc : "?";
    if (w.os_errno == 0) w.os_errno = reported_errno(desc);
    w.entries.push_back(std::string(e->func_name ? e->func_name : "?") + ": " + desc);
    return 0;
  };
  if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, visit, &walk) < 0 || walk.entries.empty())
    return "no HDF5 error description";
  // A failed read or write of the file itself: the operating system's reason says it all.
  if (walk.os_errno != 0) return squeeze_spaces(walk.entries.front()) + " (" + std::strerror(walk.os_errno) + ")";
  if (walk.entries.size() == 1) return squeeze_spaces(walk.entries.front());
  return squeeze_spaces(walk.entries.front() + " (" + walk.entries.back() + ")");
}

int error_errno() {
  int found = 0;
  auto visit = [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
    int& f = *static_cast<int*>(out);
    if (f == 0) f = reported_errno(e->desc ? e->desc : "");
    return 0;
  };
  if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, visit, &found) < 0) return 0;
  return found;
}

void prepare_library() {
  H5dont_atexit();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

void discard_further_writes(hid_t file) {
  void* handle = nullptr;
  // The POSIX (sec2) driver's handle is its file descriptor. Pointed at an empty in-memory file,
  // whatever HDF5 still has to write at close goes there and succeeds, so the file is released
  // cleanly (a close that fails to write leaves HDF5 1.10 with a half-closed file that crashes
  // its shutdown at exit).
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) >= 0 && handle) {
    const int fd = *static_cast<int*>(handle);
    const int sink = ::memfd_create("vitddp-discarded-writes", MFD_CLOEXEC);
    if (sink >= 0) {
      ::dup2(sink, fd);
      ::close(sink);
    }
  }
  H5Eclear2(H5E_DEFAULT);
}

void close_discarding(hid_t file) {
  discard_further_writes(file);
  // After a failed flush HDF5 1.10 cannot close the file ("slist already enabled"): its id stays
  // open, harmless once the library does not close it again at exit (prepare_library).
  H5Fclose(file);
  H5Eclear2(H5E_DEFAULT);
}

void WriteFile::close() {
  if (id_ < 0) return;
  // Everything to disk first: a failure here leaves the file open and intact for the destructor.
  H5_CHECK(H5Fflush(id_, H5F_SCOPE_GLOBAL), path_);
  H5_CHECK(H5Fclose(std::exchange(id_, -1)), path_);
}

WriteFile::~WriteFile() {
  if (id_ >= 0) close_discarding(id_);
}

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietErrors::~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

Handle vlen_string_type(const std::string& object) {
  Handle t(H5_CHECK(H5Tcopy(H5T_C_S1), object), H5Tclose);
  H5_CHECK(H5Tset_size(t.get(), H5T_VARIABLE), object);
  H5_CHECK(H5Tset_cset(t.get(), H5T_CSET_UTF8), object);
  return t;
}

Handle intermediate_groups_lcpl(const std::string& object) {
  Handle lcpl(H5_CHECK(H5Pcreate(H5P_LINK_CREATE), object), H5Pclose);
  H5_CHECK(H5Pset_create_intermediate_group(lcpl.get(), 1), object);
  return lcpl;
}

bool link_exists(hid_t loc, const std::string& name) {
  size_t pos = 0;
  while (true) {
    const size_t slash = name.find('/', pos);
    const std::string prefix = name.substr(0, slash);
    if (!prefix.empty() && H5_CHECK(H5Lexists(loc, prefix.c_str(), H5P_DEFAULT), name) <= 0) return false;
    if (slash == std::string::npos) return true;
    pos = slash + 1;
  }
}

std::string utc_now_iso8601() {
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace h5
}  // namespace vitddp
