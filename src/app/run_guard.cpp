#include "src/app/run_guard.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace vitddp {
namespace {
sigset_t guarded_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR2);  // used only to wake the signal thread at shutdown
  return set;
}
/// `s` as it was given on the command line: the shortest of %g's forms ("0.001", "1800", "2.5").
std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", s);
  return buf;
}
}  // namespace

void RunGuard::block_signals() {
  sigset_t set = guarded_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

RunGuard::RunGuard(int rank, double step_timeout_s, std::function<std::string()> poll)
    : rank_(rank), timeout_s_(step_timeout_s), poll_(std::move(poll)), last_beat_(std::chrono::steady_clock::now()) {
  signal_thread_ = std::thread([this] { signal_loop(); });
  watchdog_thread_ = std::thread([this] { watchdog_loop(); });
}

RunGuard::~RunGuard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  pthread_kill(signal_thread_.native_handle(), SIGUSR2);
  signal_thread_.join();
  watchdog_thread_.join();
}

void RunGuard::step_done(int step) {
  std::lock_guard<std::mutex> lock(mu_);
  last_step_ = step;
  last_beat_ = std::chrono::steady_clock::now();
}

void RunGuard::signal_loop() {
  const sigset_t set = guarded_signals();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    if (sig == SIGUSR2) continue;
    if (signal_.exchange(sig) != 0) {
      std::fprintf(stderr, "[vitddp rank %d] second signal %d: exiting now\n", rank_, sig);
      std::_Exit(128 + sig);
    }
    std::fprintf(stderr, "[vitddp rank %d] received signal %d (%s): finishing the current step, then saving and exiting\n",
                 rank_, sig, sig == SIGTERM ? "SIGTERM" : "SIGINT");
  }
}

void RunGuard::watchdog_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::seconds(1));
    if (stopping_) return;
    const double idle = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_beat_).count();
    std::string error;
    if (poll_) {
      lock.unlock();
      error = poll_();
      lock.lock();
    }
    if (!error.empty() || idle > timeout_s_) {
      if (error.empty())
        error = "step " + std::to_string(last_step_ + 1) + " did not finish within " + seconds_text(timeout_s_) +
                " s (--step-timeout): a rank died or hangs, or a step takes longer than that (raise --step-timeout)";
      std::fprintf(stderr, "[vitddp rank %d] error: %s; exiting (the results file holds every step flushed so far)\n",
                   rank_, error.c_str());
      std::fflush(stderr);
      std::_Exit(3);
    }
  }
}

}  // namespace vitddp
