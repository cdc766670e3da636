// vitddp entry point: MPI start-up, option agreement across ranks, backend choice, and the one
// place where any error becomes MPI_Abort on every rank.
#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <string>

#include "mpi/world.h"
#include "src/engine.h"
#include "src/options.h"
#include "src/trainer.h"

#ifndef VITDDP_GIT_COMMIT
#define VITDDP_GIT_COMMIT "unknown"
#endif

namespace {

using namespace vitddp;

/// Input errors: rank 0 prints one line, every rank leaves with exit code 2 (no abort needed:
/// the ranks agreed on the verdict).
int input_error(const World& w, const std::string& msg) {
  if (w.rank == 0) std::fprintf(stderr, "vitddp: error: %s\n", msg.c_str());
  MPI_Finalize();
  return 2;
}

std::string default_out(const Options& o, const World& w) {
  char stamp[32];
  std::time_t t = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::localtime(&t));
  return "vitddp-" + o.model + "-np" + std::to_string(w.world_size) + "-" + stamp + ".h5";
}

/// Rank 0's string to everyone.
std::string broadcast(const std::string& s, const World& w) {
  int n = w.rank == 0 ? (int)s.size() : 0;
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::string out = w.rank == 0 ? s : std::string(n, '\0');
  MPI_CHECK(MPI_Bcast(out.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  World w;
  try {
    w = init_world(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vitddp: error: MPI start-up failed: %s\n", e.what());
    return 1;
  }
  std::string cmd;
  for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);

  Options o;
  std::string err;
  try {
    o = parse_options(argc, argv);
  } catch (const std::exception& e) {
    err = e.what();
  }
  if (!all_ranks_ok(err.empty())) return input_error(w, err.empty() ? "another rank rejected its options" : err + " (see --help)");
  if (o.help || o.version) {
    if (w.rank == 0) std::printf("%s", o.help ? help_text().c_str() : "vitddp " VITDDP_GIT_COMMIT "\n");
    MPI_Finalize();
    return 0;
  }

  try {
    if (!o.ddp && w.world_size > 1)
      err = "--no-ddp: trains one replica without communication; run it with 1 rank (got " +
            std::to_string(w.world_size) + ")";
    if (o.backend == "auto") {
      o.backend = visible_cuda_devices() > 0 ? "gpu" : "cpu";
      if (o.backend == "cpu" && w.rank == 0)
        std::printf("[vitddp] no CUDA device visible: running the CPU backend (reference kernels, MPI all-reduce)\n");
    }
    if (o.data.rfind("idx:", 0) == 0) {
      struct stat st;
      if (stat(o.data.c_str() + 4, &st) != 0 || !S_ISDIR(st.st_mode))
        err = "--data: directory '" + o.data.substr(4) + "' does not exist";
    }
    if (o.data == "device" && o.backend != "gpu") err = "--data device: needs the GPU backend";
    if (!all_ranks_ok(err.empty())) return input_error(w, err.empty() ? "another rank rejected the configuration" : err);
    // All ranks must run the same backend (a mixed job would deadlock in the all-reduce).
    int gpu = o.backend == "gpu", gpu_min = 0, gpu_max = 0;
    MPI_CHECK(MPI_Allreduce(&gpu, &gpu_min, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(&gpu, &gpu_max, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (gpu_min != gpu_max) return input_error(w, "--backend auto: some ranks see a GPU and others do not; choose --backend");
    if (o.out.empty()) o.out = default_out(o, w);
    o.out = broadcast(o.out, w);

    const int rc = run_training(o, w, cmd);
    MPI_Finalize();
    return rc;
  } catch (const std::exception& e) {
    abort_all(w, e.what(), 1);
  }
}
