#include "src/app/stop_control.h"

#include <cstdio>
#include <utility>

namespace vitddp {

StopControl::StopControl(const World& w, double step_timeout_s, std::function<std::string()> poll,
                         bool stop_on_nonfinite)
    : world_(w), guard_(w.rank, step_timeout_s, std::move(poll)), stop_on_nonfinite_(stop_on_nonfinite) {}

StopControl::Verdict StopControl::agree(bool local_nonfinite) {
  int flags[2] = {guard_.stop_signal(), local_nonfinite ? 1 : 0}, any[2] = {0, 0};
  MPI_CHECK(MPI_Allreduce(flags, any, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (any[1]) ++nonfinite_steps_;
  return Verdict{any[0], any[1] != 0};
}

bool StopControl::stops_after(int step, const Verdict& v) {
  if (v.nonfinite) {
    if (world_.rank == 0)
      std::fprintf(stderr, "[vitddp] step %d: non-finite loss or gradients (NaN/Inf); the update was not applied%s\n",
                   step, stop_on_nonfinite_ ? ": stopping (--on-nonfinite stop)" : ", going on (--on-nonfinite skip)");
    if (stop_on_nonfinite_) {
      stop("non-finite loss or gradients at step " + std::to_string(step), 4);
      return true;
    }
  }
  if (v.signal) {
    stop("signal " + std::to_string(v.signal) + " after step " + std::to_string(step), 128 + v.signal);
    if (world_.rank == 0) std::fprintf(stderr, "[vitddp] stopping after step %d on signal %d\n", step, v.signal);
    return true;
  }
  return false;
}

void StopControl::checkpoint_failed(int step, const std::string& error) {
  if (world_.rank == 0) std::fprintf(stderr, "[vitddp] error: checkpoint after step %d: %s\n", step, error.c_str());
  stop("checkpoint failed after step " + std::to_string(step), 1);
}

void StopControl::stop(std::string reason, int exit_code) {
  reason_ = std::move(reason);
  exit_code_ = exit_code;
}

}  // namespace vitddp
