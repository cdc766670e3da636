// vitddp entry point: MPI start-up, option agreement across ranks, backend choice, and the one
// place where any error becomes MPI_Abort on every rank.
#include <sys/stat.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>

#include "model/fnv1a.h"
#include "model/param_layout.h"
#include "model/vit_config.h"
#include "mpi/world/world.h"
#include "src/app/build_info.h"
#include "src/io/checkpoint.h"
#include "src/engines/engine.h"
#include "src/app/fault_injection.h"
#include "src/engines/memory_estimate.h"
#include "src/io/h5_util.h"
#include "src/app/options.h"
#include "src/app/preflight.h"
#include "src/app/rank_agreement.h"
#include "src/app/run_guard.h"
#include "src/app/trainer.h"
#include "src/app/versions.h"

namespace {

using namespace vitddp;

/// Input errors: rank 0 prints one line, every rank leaves with exit code 2 (no abort needed:
/// the ranks agreed on the verdict).
int input_error(const World& w, const std::string& msg) {
  if (w.rank == 0) std::fprintf(stderr, "vitddp: error: %s\n", one_line(msg).c_str());
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

/// Starts MPI into `w`. Returns 0, or exit code 1 after printing why MPI did not start.
int start_world(int* argc, char*** argv, World* w) {
  try {
    *w = init_world(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vitddp: error: MPI start-up failed: %s\n", e.what());
    return 1;
  }
  return 0;
}

/// Collective. Before any rank acts on its command line (--help, --version, --dry-run and parse
/// errors exit early): ranks started with different ones (MPMD, a wrapper on one node) stop
/// together. Returns the exit code (2) when they differ, nothing when they agree.
std::optional<int> compare_command_lines(int argc, char** argv, const World& w) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (const std::string m = command_line_mismatch(args, w); !m.empty()) return input_error(w, m);
  } catch (const std::exception& e) {
    abort_all(w, e.what(), 1);
  }
  return std::nullopt;
}

/// Collective. Parses the command line into `o`; on a parse error on any rank, rank 0 prints the
/// lowest failing rank's line and every rank gets exit code 2.
std::optional<int> parse_on_all_ranks(int argc, char** argv, const World& w, Options* o) {
  std::string err;
  try {
    *o = parse_options(argc, argv);
  } catch (const std::exception& e) {
    err = e.what();
  }
  if (const std::string e = lowest_rank_error(err); !e.empty())
    return input_error(w, e.find("see --help") == std::string::npos ? e + " (see --help)" : e);
  return std::nullopt;
}

/// The backend --backend auto stands for on this rank: the GPU backend when a CUDA device is visible.
Backend resolved_backend(const Options& o) {
  if (o.backend != Backend::Auto) return o.backend;
  return visible_cuda_devices() > 0 ? Backend::Gpu : Backend::Cpu;
}

/// --help and --version: the exit code when one of them ends the run here.
std::optional<int> early_exit(const Options& o, const World& w) {
  if (o.help || o.version) {
    if (w.rank == 0) std::printf("%s", o.help ? help_text().c_str() : version_text().c_str());
    MPI_Finalize();
    return 0;
  }
  return std::nullopt;
}

/// What check_before_training checks for: a training run, or --dry-run, which prints nothing but
/// its report and reports the CPU backend's host-memory need instead of refusing it.
enum class Purpose { run, dry_run };

/// The launch-level checks that need no backend: this rank's error or "". When several fail,
/// the last one named here is the one reported.
std::string launch_error(const Options& o, const World& w) {
  std::string err;
  // Copies started without an MPI launcher each believe they are rank 0 of 1: they would all
  // train alone and write the same file. The scheduler's task count tells.
  const int tasks = launcher_task_count();
  if (w.world_size == 1 && tasks > 1)
    err = "started as rank 0 of 1, but the launcher reports " + std::to_string(tasks) +
          " tasks: MPI was not initialised across them (use mpirun, or srun --mpi=pmix with an MPI built for it)";
  if (!o.ddp && w.world_size > 1)
    err = "--no-ddp: trains one replica without communication; run it with 1 rank (got " +
          std::to_string(w.world_size) + ")";
  return err;
}

/// Why --backend auto chose the CPU backend.
const char* auto_cpu_reason() { return gpu_backend_built() ? "no CUDA device visible" : "this build has no GPU backend"; }

/// --backend auto: picks the backend for this rank and checks the backend-dependent option rules
/// for it (src/app/options.h); `err` becomes their error, if any, with why auto chose the CPU
/// backend when it did. Returns true when auto chose the CPU backend.
bool resolve_auto_backend(Options* o, std::string* err) {
  if (o->backend != Backend::Auto) return false;
  o->backend = resolved_backend(*o);
  try {
    validate_options(*o);
  } catch (const OptionError& e) {
    *err = e.what();
    if (o->backend == Backend::Cpu) *err += std::string("; --backend auto chose the CPU backend (") + auto_cpu_reason() + ")";
  }
  return o->backend == Backend::Cpu;
}

/// Rank 0: the reference kernels take minutes per step of a full-size ViT: say so before the
/// watchdog does (once the start-up checks have passed: run_training's notices).
void warn_slow_cpu_model(const Options& o, const World& w) {
  if (o.backend != Backend::Cpu || w.rank != 0) return;
  const size_t params = make_param_layout(vit_config(o.model, o.num_classes)).total;
  if (params > 20'000'000)
    std::printf("[vitddp] warning: %s has %.1f M parameters: on the CPU backend one step can take longer than "
                "--step-timeout (%.0f s), and each rank needs %s GiB of host memory at batch %d (--dry-run lists it); "
                "to try the CPU backend use a small model (--model vit_tiny or vit_micro)\n",
                o.model.c_str(), params / 1e6, o.step_timeout_s, gib(estimate_cpu_memory(o, w.world_size).peak_bytes()).c_str(),
                o.batch_size);
}

/// The checks of the resolved backend's inputs: this rank's error or `err` when none fails
/// (a later failing check replaces an earlier one).
std::string input_checks(const Options& o, const World& w, std::string err) {
  if (o.data.kind == DataSpec::Kind::idx) {
    struct stat st;
    if (stat(o.data.dir.c_str(), &st) != 0) err = "--data: directory '" + o.data.dir + "' does not exist";
    else if (!S_ISDIR(st.st_mode)) err = "--data: '" + o.data.dir + "' is not a directory (idx:DIR names the folder of the IDX files)";
  }
  if (o.allreduce == AllReduceImpl::CopyEngine && o.ddp && w.local_size != w.world_size)
    err = "--allreduce copy-engine: needs every rank on one node (this node has " + std::to_string(w.local_size) +
          " of " + std::to_string(w.world_size) + " ranks); use --allreduce nccl across nodes";
  if (const std::string f = FaultInjection::check(o, w.world_size); !f.empty()) err = f;
  return err;
}

/// Collective. Every check before training: launch, backend, inputs, the same backend and the
/// same options on every rank, and, for a run, the CPU backend's host memory. Completes `o`
/// (resolved backend, --out, --checkpoint-path); `auto_chose_cpu` (optional) is set when --backend
/// auto chose the CPU backend. Returns the exit code (2) when a check fails.
std::optional<int> check_before_training(Options* o, const World& w, Purpose purpose, bool* auto_chose_cpu = nullptr) {
  std::string err = launch_error(*o, w);
  const bool cpu_by_auto = resolve_auto_backend(o, &err);
  if (auto_chose_cpu) *auto_chose_cpu = cpu_by_auto;
  if (o->backend == Backend::Gpu && !gpu_backend_built()) return input_error(w, gpu_backend_missing("--backend gpu"));
  if (const std::string e = lowest_rank_error(input_checks(*o, w, err)); !e.empty()) return input_error(w, e);
  // All ranks must run the same backend (a mixed job would deadlock in the all-reduce).
  if (!all_ranks_equal(o->backend == Backend::Gpu ? 1 : 0)) return input_error(w, "--backend auto: some ranks see a GPU and others do not; choose --backend");
  if (o->out.empty()) o->out = default_out(*o, w);
  o->out = broadcast(o->out, w);
  if (o->checkpoint_every > 0 && o->checkpoint_path.empty()) o->checkpoint_path = default_checkpoint_path(o->out);
  // Every rank must run the same configuration (same command line, same environment defaults).
  if (!all_ranks_equal(options_fingerprint(*o))) return input_error(w, "ranks were started with different options: every rank must get the same command line");
  // The CPU backend's host memory, before it allocates: every rank of this host at once (the
  // dry run reports this need, on whatever host it runs).
  if (purpose == Purpose::dry_run) return std::nullopt;
  const std::string mem = o->backend == Backend::Cpu ? host_memory_refusal(estimate_cpu_memory(*o, w.world_size), w.local_size, mem_available_bytes()) : "";
  if (const std::string e = lowest_rank_error(mem); !e.empty()) return input_error(w, e);
  return std::nullopt;
}

/// --dry-run: the checks of a run with these options, without its work, leaving every file as it
/// was: check_before_training, then preflight (every input read and checked, every output
/// checked, absent ones created and removed again by rank 0), on every rank, agreed as in a
/// run, the same one line and exit code 2 when one fails; then rank 0 prints the memory estimate
/// of one rank of the backend the run would use (the GPU backend's device memory, or the CPU
/// backend's host memory), exit 0. Needs no GPU. The GPU estimate needs the GPU backend built
/// (exit 2 otherwise). Collective.
int dry_run(Options o, const World& w) {
  if (o.backend == Backend::Gpu && !gpu_backend_built()) return input_error(w, gpu_backend_missing("--dry-run"));
  if (const auto rc = check_before_training(&o, w, Purpose::dry_run)) return *rc;
  h5::prepare_library();  // as run_training: HDF5 failures as one-line exceptions
  const ParamLayout layout = make_param_layout(vit_config(o.model, o.num_classes));
  if (RunInputs in; !preflight(o, w, layout, &in)) {
    MPI_Finalize();
    return 2;
  }
  const MemoryEstimate e = o.backend == Backend::Gpu ? estimate_gpu_memory(o, w.world_size) : estimate_cpu_memory(o, w.world_size);
  if (w.rank == 0) std::printf("%s", memory_report(e).c_str());
  MPI_Finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // SIGTERM/SIGINT are received by the run guard's thread (src/app/run_guard.h); block them before
  // MPI or CUDA start any thread so that every thread inherits the mask.
  RunGuard::block_signals();
  // Output to a closed pipe (vitddp ... | head) fails the write instead of killing the run.
  std::signal(SIGPIPE, SIG_IGN);
  World w;
  if (const int rc = start_world(&argc, &argv, &w); rc != 0) return rc;
  std::string cmd;
  for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);
  if (const auto rc = compare_command_lines(argc, argv, w)) return *rc;
  Options o;
  if (const auto rc = parse_on_all_ranks(argc, argv, w, &o)) return *rc;
  try {
    if (const auto rc = early_exit(o, w)) return *rc;
    if (o.dry_run) return dry_run(o, w);
    bool auto_chose_cpu = false;
    if (const auto rc = check_before_training(&o, w, Purpose::run, &auto_chose_cpu)) return *rc;
    const int rc = run_training(o, w, cmd, [&] {  // after every start-up check, before the engine
      if (auto_chose_cpu && w.rank == 0)
        std::printf("[vitddp] %s: running the CPU backend (reference kernels, MPI all-reduce)\n", auto_cpu_reason());
      warn_slow_cpu_model(o, w);
    });
    MPI_Finalize();
    return rc;
  } catch (const std::exception& e) {
    abort_all(w, e.what(), 1);
  }
}
