#include "src/app/fault_injection.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace vitddp {

FaultInjection::FaultInjection(const Options& o)
    : step_(o.debug_fail_at_step), rank_(o.debug_fail_rank), mode_(o.debug_fail_mode) {}

std::string FaultInjection::check(const Options& o, int world_size) {
  if (o.debug_fail_at_step < 0) return "";
  if (o.debug_fail_rank >= world_size)
    return "--debug-fail-rank: rank " + std::to_string(o.debug_fail_rank) + " does not exist in a job of " +
           std::to_string(world_size) + " rank(s)";
  return "";
}

void FaultInjection::trigger(FaultTarget& target, int rank, int step) const {
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
      target.abort_communicator();
      return;
  }
}

}  // namespace vitddp
