// A Chrome trace-event file (JSON) of the run's timeline, which Perfetto (ui.perfetto.dev) and
// chrome://tracing open: one process per rank, one track (thread) per stream and lane.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mpi/world/world.h"
#include "src/engines/engine.h"

namespace vitddp {

/// One clock for the ranks' traces. Every rank's step times are relative to the start of its own
/// first step (StepRecord::start_ms); this places that start on a wall clock shared by the ranks.
/// start() (collective: MPI_Barrier, then each rank reads CLOCK_REALTIME, std::chrono::system_clock)
/// is called before the run's first batch is fetched; mark_first_step() at the host's start of
/// the first step; offsets_ms() (collective) gives rank 0, for every rank r,
///   offset_r = first_step_r - t0,  t0 = MPI_Allreduce MIN over the ranks of their start() times,
/// so every event of the trace lies at ts >= 0 (the first batch's wait included).
/// Skew bound between ranks: on one host the ranks read one clock, and the error is the host-to-
/// device latency of the first step's start event (GPU: the event runs when the idle compute
/// stream reaches it, typically < 50 us after the launch; CPU backend: the same host clock, < 1 us);
/// across hosts add the hosts' CLOCK_REALTIME offset (NTP/PTP synchronisation, not measured here:
/// typically < 1 ms with NTP on one network). Device-clock drift against the host over a run is
/// not corrected (ppm: < 10 us over 10 s).
class TraceClock {
 public:
  /// An unused clock: offsets_ms() returns zeros and needs no collective.
  TraceClock() = default;
  /// Collective over MPI_COMM_WORLD.
  static TraceClock start(const World& w);
  /// The host start of this run's first step on this rank (once; later calls are ignored).
  void mark_first_step();
  /// Collective when started: rank 0 gets one offset per rank (ms, >= 0), the other ranks an
  /// empty vector. A rank that ran no step uses its start() time.
  std::vector<double> offsets_ms(const World& w) const;

 private:
  bool started_ = false, marked_ = false;
  int64_t start_ns_ = 0, first_step_ns_ = 0;  // CLOCK_REALTIME, ns since the epoch
};

/// Collects complete events ("ph":"X") on rank 0 and writes them at the end.
/// Format: Trace Event Format, https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
/// Streams per rank: "steps" (Batch i), "compute stream", "comm stream", "host data". Perfetto
/// draws complete events of one track only when they nest, so write() spreads each stream's
/// events over lanes: an event goes to the first lane of its stream whose last event ended at or
/// before its start (greedy interval colouring in start order, the shorter first on a tie: as
/// few lanes as events in flight at once). Lane k of stream s is track (tid) 1000 s + k, named "<stream>" (k = 0) or
/// "<stream> lane <k+1>"; so the events of one track never overlap. Times are written in
/// microseconds with 3 decimals (whole ns), so the written values keep that property exactly.
class ChromeTrace {
 public:
  enum Thread { Steps = 0, Compute = 1, Comm = 2, HostData = 3 };
  /// Adds one event; times in milliseconds from the start of the run's first step on that rank
  /// (StepRecord::start_ms' origin). A negative duration is written as 0.
  void add(int rank, Thread thread, const std::string& name, double start_ms, double duration_ms);
  /// The same from `begin_ms` to `end_ms` (each rounded to whole ns, so that spans laid end to end
  /// share their boundary exactly); an end before the begin gives duration 0.
  void add_span(int rank, Thread thread, const std::string& name, double begin_ms, double end_ms);
  /// Adds step `step` (0-based, as the results file) of rank `rank` from its record (as rank 0
  /// rebuilt it, StepRow::unpack): "Batch <step>" (step_ms) on the steps stream from the step
  /// start (start_ms); on the compute stream "input wait", "forward", "backward" (to
  /// backward_end_ms), "exposed comm" and "optimizer step" laid end to end; "get batch (wait)"
  /// (data_wait_ms) on the host-data stream, ending at the step start; "all-reduce bucket <b>"
  /// ("reduce-scatter bucket <b>" where buckets.reduce_scattered) (buckets.start_ms to end_ms) on
  /// the comm stream for every bucket of r.buckets, and "all-gather bucket <b>"
  /// (allgather_start_ms to allgather_end_ms) where the bucket's parameters were all-gathered.
  void add_step(int rank, int step, const StepRecord& r);
  /// The trace as JSON text: metadata (process_name "rank r", thread_name per track, sort
  /// indices), then every event. `offsets_ms[r]` (TraceClock::offsets_ms; missing entries 0) is
  /// added to rank r's events; should an event still start before 0, every event is shifted so
  /// that the earliest starts at 0.
  std::string json(int world_size, const std::vector<double>& offsets_ms = {}) const;
  /// Writes json() to `path` + ".tmp" (write(2), fsync(2)), then renames it to `path`, so a
  /// partial file never appears under the final name. On any failure the .tmp is removed and
  /// std::runtime_error thrown, one line naming the file and the reason (strerror), e.g.
  /// "--trace: cannot write 'run.json.tmp': No space left on device". The start-up checks
  /// (output_paths_problem) decide whether `path` may be replaced.
  void write(const std::string& path, int world_size, const std::vector<double>& offsets_ms = {}) const;
  size_t size() const { return events_.size(); }

 private:
  struct Event {
    int rank;
    Thread thread;
    std::string name;
    int64_t ts_ns, dur_ns;  // from the rank's origin
  };
  std::vector<Event> events_;
};

}  // namespace vitddp
