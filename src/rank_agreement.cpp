#include "src/rank_agreement.h"

#include <climits>
#include <cstdio>
#include <exception>

namespace vitddp {

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
  if (w.rank == 0) std::fprintf(stderr, "vitddp: error: %s%s\n", prefix.c_str(), err.c_str());
  return false;
}

}  // namespace vitddp
