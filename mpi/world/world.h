// The MPI world of one vitddp process: rank, local rank, device binding, fatal-error abort.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace vitddp {

/// Where this process sits. local_rank / local_size come from
/// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): the ranks sharing this node.
struct World {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string hostname;
};

/// MPI_Init_thread (MPI_THREAD_FUNNELED: only the main thread calls MPI) and the world layout.
/// Throws std::runtime_error on MPI failure.
World init_world(int* argc, char*** argv);

/// The GPU this rank drives: device 0 when the rank sees exactly one (a scheduler that isolates
/// one GPU per task), else local_rank modulo `visible_devices`. Throws std::runtime_error with an
/// explanation when more ranks share this node than it has visible GPUs (two ranks on one GPU
/// would silently halve throughput, and NCCL refuses duplicate GPUs in one communicator), or when
/// no GPU is visible. Duplicates among isolated ranks are found later by comparing GPU UUIDs.
int select_device(const World& w, int visible_devices);

/// Prints "[vitddp rank R] error: msg" to stderr and ends every rank with MPI_Abort(code): never a
/// hang, whatever the other ranks are doing. Safe before MPI_Init and after MPI_Finalize (then it
/// exits with `code`).
[[noreturn]] void abort_all(const World& w, const std::string& msg, int code);

/// True between MPI_Init and MPI_Finalize. Outside (a unit test driving an engine without a
/// launcher) the agreement helpers below act on the single process.
bool mpi_active();

/// True on every rank iff `local_ok` is true on every rank (MPI_Allreduce, MPI_LAND). Used to
/// agree on input errors before any rank starts work, so all ranks exit together.
bool all_ranks_ok(bool local_ok);

/// True on every rank iff `value` is the same on every rank (MPI_Allreduce of MIN and MAX): used
/// to compare fingerprints of the configuration and the bucket layout before any work.
bool all_ranks_equal(uint64_t value);

/// Checks an MPI return code; throws std::runtime_error naming the call, file and line.
void mpi_check(int rc, const char* call, const char* file, int line);

}  // namespace vitddp

#define MPI_CHECK(call) ::vitddp::mpi_check((call), #call, __FILE__, __LINE__)
