#include "src/fault_injection.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace vitddp {

namespace {
FailMode parse_fail_mode(const std::string& m) {
  if (m == "throw") return FailMode::Throw;
  if (m == "exit") return FailMode::Exit;
  if (m == "nccl-abort") return FailMode::NcclAbort;
  throw std::invalid_argument("--debug-fail-mode: unknown value '" + m + "' (choose one of: throw, exit, nccl-abort)");
}
}  // namespace

FaultInjection::FaultInjection(const Options& o)
    : step_(o.debug_fail_at_step), rank_(o.debug_fail_rank), mode_(parse_fail_mode(o.debug_fail_mode)) {}

std::string FaultInjection::check(const Options& o, int world_size, const std::string& backend) {
  if (o.debug_fail_at_step < 0) return "";
  if (o.debug_fail_rank >= world_size)
    return "--debug-fail-rank: rank " + std::to_string(o.debug_fail_rank) + " does not exist in a job of " +
           std::to_string(world_size) + " rank(s)";
  if (o.debug_fail_mode == "nccl-abort" && (backend != "gpu" || !o.ddp))
    return "--debug-fail-mode nccl-abort: needs the GPU backend with DDP (an NCCL communicator)";
  if (o.debug_fail_mode == "nccl-abort" && o.allreduce != "nccl")
    return "--debug-fail-mode nccl-abort: with --allreduce " + o.allreduce +
           " the gradients do not go through NCCL, so aborting the communicator tests nothing";
  return "";
}

void FaultInjection::trigger(Engine& engine, int rank, int step) const {
  const std::string where = "rank " + std::to_string(rank) + " fails in step " + std::to_string(step);
  switch (mode_) {
    case FailMode::Throw:
      throw std::runtime_error("debug fault injection: " + where + " (--debug-fail-mode throw)");
    case FailMode::Exit:
      std::fprintf(stderr, "[vitddp rank %d] error: debug fault injection: %s: exiting with status 1 (--debug-fail-mode exit)\n",
                   rank, where.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    case FailMode::NcclAbort:
      std::fprintf(stderr, "[vitddp rank %d] error: debug fault injection: %s: ncclCommAbort with the step's "
                   "all-reduces in flight (--debug-fail-mode nccl-abort); the peers' watchdog must end the job\n",
                   rank, where.c_str());
      std::fflush(stderr);
      engine.debug_abort_communicator();
      return;
  }
}

}  // namespace vitddp
