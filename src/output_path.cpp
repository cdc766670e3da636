#include "src/output_path.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace vitddp {

std::filesystem::path output_directory(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::filesystem::path(".") : parent;
}

std::string output_directory_problem(const std::string& what, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path parent = output_directory(path);
  const std::string dir = "directory '" + parent.string() + "'";
  std::error_code ec;
  if (!fs::exists(parent, ec)) return what + ": " + dir + " does not exist";
  if (!fs::is_directory(parent, ec)) return what + ": '" + parent.string() + "' is not a directory";
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    return what + ": " + dir + " is not writable (" + std::strerror(errno) + ")";
  return "";
}

}  // namespace vitddp
