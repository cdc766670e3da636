// vitddp entry point: MPI start-up, option agreement across ranks, backend choice, and the one
// place where any error becomes MPI_Abort on every rank.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "model/fnv1a.h"
#include "model/param_layout.h"
#include "model/vit_config.h"
#include "mpi/world/world.h"
#include "src/build_info.h"
#include "src/checkpoint.h"
#include "src/engine.h"
#include "src/fault_injection.h"
#include "src/memory_estimate.h"
#include "src/options.h"
#include "src/run_guard.h"
#include "src/trainer.h"

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

/// A launcher-independent hint that this process is one of several tasks: the scheduler's or
/// launcher's own count of tasks (0 when none is set).
int launcher_task_count() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}

/// FNV-1a hash of every option value, so ranks can check they run the same configuration.
uint64_t options_fingerprint(const Options& o) {
  Fnv1a h;
  for (const auto& [k, v] : option_values(o)) h.add(k + "=" + v + ";");
  return h.value();
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
  // SIGTERM/SIGINT are received by the run guard's thread (src/run_guard.h); block them before
  // MPI or CUDA start any thread so that every thread inherits the mask.
  RunGuard::block_signals();
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
    if (w.rank == 0) std::printf("%s", o.help ? help_text().c_str() : (std::string("vitddp ") + vitddp_git_commit() + "\n").c_str());
    MPI_Finalize();
    return 0;
  }

  try {
    if (o.dry_run && !gpu_backend_built()) return input_error(w, gpu_backend_missing("--dry-run"));
    if (o.dry_run) {  // the memory estimate needs no GPU and no other check
      if (w.rank == 0) std::printf("%s", memory_report(estimate_gpu_memory(o, w.world_size)).c_str());
      MPI_Finalize();
      return 0;
    }
    // Copies started without an MPI launcher each believe they are rank 0 of 1: they would all
    // train alone and write the same file. The scheduler's task count tells.
    const int tasks = launcher_task_count();
    if (w.world_size == 1 && tasks > 1)
      err = "started as rank 0 of 1, but the launcher reports " + std::to_string(tasks) +
            " tasks: MPI was not initialised across them (use mpirun, or srun --mpi=pmix with an MPI built for it)";
    if (!o.ddp && w.world_size > 1)
      err = "--no-ddp: trains one replica without communication; run it with 1 rank (got " +
            std::to_string(w.world_size) + ")";
    if (o.backend == "auto") {
      o.backend = visible_cuda_devices() > 0 ? "gpu" : "cpu";
      if (o.backend == "cpu" && w.rank == 0)
        std::printf("[vitddp] no CUDA device visible: running the CPU backend (reference kernels, MPI all-reduce)\n");
    }
    if (o.backend == "gpu" && !gpu_backend_built()) return input_error(w, gpu_backend_missing("--backend gpu"));
    if (o.backend == "cpu" && w.rank == 0) {
      // The reference kernels take minutes per step of a full-size ViT: say so before the watchdog does.
      const size_t params = make_param_layout(vit_config(o.model, o.num_classes)).total;
      if (params > 20'000'000)
        std::printf("[vitddp] warning: %s has %.1f M parameters: on the CPU backend one step can take longer than "
                    "--step-timeout (%.0f s), and each rank needs several GB of host memory (vit_l_32 at batch 32: "
                    "about 12 GB, measured); to try the CPU backend use a small model (--model vit_tiny or vit_micro)\n",
                    o.model.c_str(), params / 1e6, o.step_timeout_s);
    }
    if (o.data.rfind("idx:", 0) == 0) {
      struct stat st;
      if (stat(o.data.c_str() + 4, &st) != 0 || !S_ISDIR(st.st_mode))
        err = "--data: directory '" + o.data.substr(4) + "' does not exist";
    }
    if (o.data == "device" && o.backend != "gpu") err = "--data device: needs the GPU backend";
    if (o.patch_embed == "cudnn" && o.backend != "gpu") err = "--patch-embed cudnn: needs the GPU backend";
    if (o.allreduce == "copy-engine" && o.backend != "gpu") err = "--allreduce copy-engine: needs the GPU backend";
    if (o.allreduce == "copy-engine" && o.ddp && w.local_size != w.world_size)
      err = "--allreduce copy-engine: needs every rank on one node (this node has " + std::to_string(w.local_size) +
            " of " + std::to_string(w.world_size) + " ranks); use --allreduce nccl across nodes";
    if (o.gemm_sm_carveout > 0 && o.backend != "gpu") err = "--gemm-sm-carveout: needs the GPU backend (cuBLASLt)";
    if (o.nccl_max_ctas > 0 && o.backend != "gpu") err = "--nccl-max-ctas: needs the GPU backend (NCCL)";
    if (!o.cuda_graph && o.backend != "gpu") err = "--cuda-graph off: needs the GPU backend (the CPU backend has no CUDA graph)";
    if (o.attention != "auto" && o.backend != "gpu")
      err = "--attention " + o.attention + ": needs the GPU backend (the CPU backend has one attention implementation)";
    if (o.precision != "fp32" && o.backend != "gpu")
      err = "--precision " + o.precision + ": needs the GPU backend (the CPU backend computes in fp32 only)";
    if (const std::string f = FaultInjection::check(o, w.world_size, o.backend); !f.empty()) err = f;
    if (!all_ranks_ok(err.empty())) return input_error(w, err.empty() ? "another rank rejected the configuration" : err);
    // All ranks must run the same backend (a mixed job would deadlock in the all-reduce).
    if (!all_ranks_equal(o.backend == "gpu" ? 1 : 0)) return input_error(w, "--backend auto: some ranks see a GPU and others do not; choose --backend");
    if (o.out.empty()) o.out = default_out(o, w);
    o.out = broadcast(o.out, w);
    if (o.checkpoint_every > 0 && o.checkpoint_path.empty()) o.checkpoint_path = default_checkpoint_path(o.out);
    // Every rank must run the same configuration (same command line, same environment defaults).
    if (!all_ranks_equal(options_fingerprint(o))) return input_error(w, "ranks were started with different options: every rank must get the same command line");

    const int rc = run_training(o, w, cmd);
    MPI_Finalize();
    return rc;
  } catch (const std::exception& e) {
    abort_all(w, e.what(), 1);
  }
}
