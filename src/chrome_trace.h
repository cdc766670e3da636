// A Chrome trace-event file (JSON) of the run's timeline, which Perfetto (ui.perfetto.dev) and
// chrome://tracing open: one process per rank, one thread per stream.
#pragma once
#include <string>
#include <vector>

#include "src/engine.h"

namespace vitddp {

/// Collects complete events ("ph":"X") on rank 0 and writes them at the end.
/// Format: Trace Event Format, https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
/// Threads per rank: 0 "steps" (Batch i), 1 "compute stream", 2 "comm stream", 3 "host data".
class ChromeTrace {
 public:
  enum Thread { Steps = 0, Compute = 1, Comm = 2, HostData = 3 };
  /// Adds one event; times in milliseconds from the run's origin on that rank (converted to us).
  void add(int rank, Thread thread, const std::string& name, double start_ms, double duration_ms);
  /// Adds step `step` of rank `rank` from its record (as rank 0 rebuilt it, StepRow::unpack):
  /// "Batch <step>" (step_ms) on the steps thread from the step start (start_ms); on the compute
  /// stream "input wait", "forward", "backward" (to backward_end_ms), "exposed comm" and
  /// "optimizer step" laid end to end; "get batch (wait)" (data_wait_ms) on the host-data thread,
  /// ending at the step start; "all-reduce bucket <b>" (buckets.start_ms to end_ms) on the comm
  /// stream for every bucket of r.buckets.
  void add_step(int rank, int step, const StepRecord& r);
  /// The trace as JSON text: metadata events naming each of `world_size` ranks and its threads,
  /// then every event.
  std::string json(int world_size) const;
  /// Writes json() to `path` + ".tmp" (write(2), fsync(2)), then renames it to `path`, so a
  /// partial file never appears under the final name. On any failure the .tmp is removed and
  /// std::runtime_error thrown, one line naming the file and the reason (strerror), e.g.
  /// "--trace: cannot write 'run.json.tmp': No space left on device". The start-up checks
  /// (output_paths_problem) decide whether `path` may be replaced.
  void write(const std::string& path, int world_size) const;
  size_t size() const { return events_.size(); }

 private:
  struct Event {
    int rank;
    Thread thread;
    std::string name;
    double ts_us, dur_us;
  };
  std::vector<Event> events_;
};

}  // namespace vitddp
