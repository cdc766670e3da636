#include "src/app/versions.h"

#include <hdf5.h>
#include <mpi.h>

#include "src/app/build_info.h"

namespace vitddp {

std::string version_text() {
  std::string s = std::string("vitddp ") + vitddp_git_commit() + "\n";
  for (const auto& [library, version] : gpu_library_versions()) s += "  " + library + " " + version + "\n";
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(mpi, &len);
  std::string m(mpi);
  m = m.substr(0, m.find_first_of("\n,"));
  s += "  MPI " + m + "\n";
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  s += "  HDF5 " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release) + "\n";
  return s;
}

}  // namespace vitddp
