#include "src/app/rank_agreement.h"

#include <climits>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <set>

#include "model/fnv1a.h"

namespace vitddp {
namespace {

/// Option name -> one entry per occurrence: the values after it, '\0'-separated ("--name=v" counts
/// as "--name v"); "" collects the arguments before the first option.
std::map<std::string, std::vector<std::string>> as_options(const std::vector<std::string>& args) {
  std::map<std::string, std::vector<std::string>> m;
  std::string current;
  for (const auto& a : args) {
    if (a.rfind("--", 0) == 0) {
      const size_t eq = a.find('=');
      current = a.substr(0, eq);
      m[current].push_back(eq == std::string::npos ? "" : a.substr(eq + 1));
    } else {
      auto& occurrences = m[current];
      if (occurrences.empty()) occurrences.emplace_back();
      std::string& values = occurrences.back();
      values = values.empty() ? a : values + '\0' + a;
    }
  }
  return m;
}

/// Each argument followed by '\0' (so that empty arguments survive).
std::string encode(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += a + '\0';
  return s;
}

std::vector<std::string> decode(const std::string& s) {
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == '\0') {
      args.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return args;
}

std::string bcast_string(std::string s, int root) {
  int n = (int)s.size();
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT, root, MPI_COMM_WORLD));
  s.resize(n);
  MPI_CHECK(MPI_Bcast(s.data(), n, MPI_CHAR, root, MPI_COMM_WORLD));
  return s;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 8) s += " and " + std::to_string(ranks.size() - 8) + " more";
  return s;
}

}  // namespace

std::vector<std::string> differing_options(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  const auto ma = as_options(a), mb = as_options(b);
  std::set<std::string> names;
  for (const auto& [k, v] : ma)
    if (!mb.count(k) || mb.at(k) != v) names.insert(k);
  for (const auto& [k, v] : mb)
    if (!ma.count(k)) names.insert(k);
  return {names.begin(), names.end()};
}

std::string command_line_mismatch(const std::vector<std::string>& args, const World& w) {
  // The options in a canonical form (sorted by name), hashed: equal hashes on every rank -> agreed.
  Fnv1a h;
  for (const auto& [name, values] : as_options(args)) h.add(encode({name}) + encode(values) + '\1');
  const uint64_t mine = h.value();
  std::vector<uint64_t> all(w.world_size);
  MPI_CHECK(MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD));
  bool same = true;
  for (uint64_t x : all) same = same && x == all[0];
  if (same) return "";

  const std::vector<std::string> root = decode(bcast_string(w.rank == 0 ? encode(args) : "", 0));
  std::string diff;
  for (const auto& name : differing_options(root, args)) diff += (name.empty() ? "(an argument before the options)" : name) + '\0';
  const int n = (int)diff.size();
  std::vector<int> counts(w.world_size), offsets(w.world_size);
  MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::string gathered;
  if (w.rank == 0) {
    int total = 0;
    for (int r = 0; r < w.world_size; ++r) offsets[r] = total, total += counts[r];
    gathered.resize(total);
  }
  MPI_CHECK(MPI_Gatherv(diff.data(), n, MPI_CHAR, gathered.data(), counts.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD));
  if (w.rank != 0) return "the command line differs from rank 0's";
  std::map<std::string, std::vector<int>> where;  // option -> the ranks where it differs
  for (int r = 1; r < w.world_size; ++r)
    for (const auto& name : decode(gathered.substr(offsets[r], counts[r]))) where[name].push_back(r);
  std::string line = "ranks were started with different options:";
  bool first = true;
  for (const auto& [name, ranks] : where) {
    line += std::string(first ? " " : "; ") + name + " differs on " + rank_list(ranks);
    first = false;
  }
  return line + " (every rank must get the same command line)";
}

std::string lowest_rank_error(const std::string& local_error) {
  if (!mpi_active()) return local_error;
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  const int mine = local_error.empty() ? INT_MAX : rank;
  int lowest = INT_MAX;
  MPI_CHECK(MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (lowest == INT_MAX) return "";
  std::string msg = rank == lowest ? local_error : std::string();
  int len = (int)msg.size();
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, lowest, MPI_COMM_WORLD));
  msg.resize((size_t)len);
  MPI_CHECK(MPI_Bcast(msg.data(), len, MPI_CHAR, lowest, MPI_COMM_WORLD));
  return msg;
}

std::string error_of(const std::function<void()>& check) {
  try {
    check();
  } catch (const std::exception& e) {
    return *e.what() ? e.what() : "unknown error";
  }
  return "";
}

bool agree_or_report(const World& w, const std::string& local_error, const std::string& prefix) {
  const std::string err = lowest_rank_error(local_error);
  if (err.empty()) return true;
  if (w.rank == 0) std::fprintf(stderr, "vitddp: error: %s\n", one_line(prefix + err).c_str());
  return false;
}

}  // namespace vitddp
