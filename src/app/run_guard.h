// Ends a run cleanly on SIGTERM/SIGINT and promptly on a hang: the parts of a multi-GPU job that
// must never burn an allocation silently.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace vitddp {

/// Two helper threads for one rank:
///  - a signal thread that sigwait()s for SIGTERM (what Slurm and mpirun send at the time limit or
///    on cancel) and SIGINT; the first one sets stop_signal() (the trainer then finishes the
///    step, agrees with the other ranks, flushes and closes the results file and exits with
///    128 + signal); a second one ends the process at once with that code. No signal handler and
///    no global flag: the signals are blocked in every thread (block_signals()) and received here.
///  - a watchdog that ends the process (exit code 3, after a message naming the rank and the step)
///    when no step has completed for `step_timeout_s` seconds - a dead or hung peer leaves the
///    survivors blocked inside NCCL or MPI, and mpirun then ends the whole job - or when `poll`
///    reports an error (e.g. NCCL's asynchronous error of a failed peer).
class RunGuard {
 public:
  /// Blocks SIGTERM and SIGINT in the calling thread and every thread it starts later. Call first
  /// thing in main(), before MPI_Init starts any thread.
  static void block_signals();

  /// `poll` is called about once a second from the watchdog thread and returns "" or an error
  /// message (it must be thread-safe); may be empty.
  RunGuard(int rank, double step_timeout_s, std::function<std::string()> poll = {});
  ~RunGuard();
  RunGuard(const RunGuard&) = delete;
  RunGuard& operator=(const RunGuard&) = delete;

  /// The signal received (SIGTERM, SIGINT) or 0.
  int stop_signal() const { return signal_.load(); }
  /// Heartbeat: step `step` has completed (restarts the watchdog's clock).
  void step_done(int step);

 private:
  void signal_loop();
  void watchdog_loop();

  const int rank_;
  const double timeout_s_;
  std::function<std::string()> poll_;
  std::atomic<int> signal_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int last_step_ = -1;
  std::chrono::steady_clock::time_point last_beat_;
  std::thread signal_thread_, watchdog_thread_;
};

}  // namespace vitddp
