#include "mpi/world/nccl_log.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <vector>

namespace vitddp {

std::string redirect_nccl_info_log(int rank) {
  if (std::getenv("NCCL_DEBUG")) return "";
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/vitddp-nccl-" + std::to_string(getpid()) +
                           "-r" + std::to_string(rank) + ".log";
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "INIT,P2P", 1);
  setenv("NCCL_DEBUG_FILE", path.c_str(), 1);
  return path;
}

std::string read_nccl_transport(const std::string& path) {
  if (path.empty()) return "unknown";
  std::ifstream f(path);
  if (!f) return "unknown";
  std::map<std::string, int> kinds;
  std::set<std::string> details;
  std::string line;
  while (std::getline(f, line)) {
    const size_t at = line.find(" via ");
    if (at == std::string::npos || line.find("Channel") == std::string::npos) continue;
    std::string d = line.substr(at + 5);
    d = d.substr(0, d.find_first_of(" \r\n"));
    details.insert(d);
    ++kinds[d.substr(0, d.find('/'))];
  }
  f.close();
  std::remove(path.c_str());
  if (kinds.empty()) return "none";
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [k, n] : kinds) order.emplace_back(-n, k);
  std::sort(order.begin(), order.end());
  std::string out;
  for (const auto& [n, k] : order) out += (out.empty() ? "" : "+") + k;
  out += " [";
  bool first = true;
  for (const auto& d : details) {
    out += (first ? "" : ", ") + d;
    first = false;
  }
  return out + "]";
}

}  // namespace vitddp
