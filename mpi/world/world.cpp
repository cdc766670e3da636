#include "mpi/world/world.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace vitddp {

void mpi_check(int rc, const char* call, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  int rank = -1, init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  throw std::runtime_error("rank " + std::to_string(rank) + ": MPI call failed at " + file + ":" +
                           std::to_string(line) + ": " + call + ": " + msg);
}

World init_world(int* argc, char*** argv) {
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  // Errors come back as return codes so MPI_CHECK can name the call.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  World w;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &w.rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &w.world_size));
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &w.local_rank));
  MPI_CHECK(MPI_Comm_size(local, &w.local_size));
  MPI_CHECK(MPI_Comm_free(&local));
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  w.hostname = host;
  return w;
}

int select_device(const World& w, int visible_devices) {
  if (visible_devices <= 0)
    throw std::runtime_error("no CUDA device is visible on host " + w.hostname +
                             " (use --backend cpu to run without a GPU)");
  // A scheduler that gives each task its own GPU (CUDA_VISIBLE_DEVICES per task, Slurm
  // --gpus-per-task=1) leaves every rank with exactly one visible device: use it. Whether two
  // ranks got the same GPU is checked by UUID once the devices are chosen.
  if (visible_devices == 1) return 0;
  if (w.local_size > visible_devices)
    throw std::runtime_error(std::to_string(w.local_size) + " ranks share host " + w.hostname + " but it has only " +
                             std::to_string(visible_devices) +
                             " visible GPU(s): start at most one rank per GPU (mpirun -np " +
                             std::to_string(visible_devices) + " per node)");
  return w.local_rank % visible_devices;
}

void abort_all(const World& w, const std::string& msg, int code) {
  std::fprintf(stderr, "[vitddp rank %d] error: %s\n", w.rank, msg.c_str());
  std::fflush(stderr);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

bool mpi_active() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

bool all_ranks_ok(bool local_ok) {
  if (!mpi_active()) return local_ok;  // a single process without MPI (unit tests)
  int in = local_ok ? 1 : 0, out = 0;
  MPI_CHECK(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD));
  return out != 0;
}

bool all_ranks_equal(uint64_t value) {
  if (!mpi_active()) return true;
  uint64_t lo = 0, hi = 0;
  MPI_CHECK(MPI_Allreduce(&value, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD));
  MPI_CHECK(MPI_Allreduce(&value, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD));
  return lo == hi;
}

}  // namespace vitddp
