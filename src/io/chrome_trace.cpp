#include "src/io/chrome_trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace vitddp {
namespace {

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

int64_t realtime_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t ms_to_ns(double ms) { return std::llround(ms * 1e6); }

/// Whole nanoseconds as microseconds with 3 decimals ("-" for negatives), exactly.
std::string us_text(int64_t ns) {
  char buf[48];
  const int64_t a = ns < 0 ? -ns : ns;
  std::snprintf(buf, sizeof(buf), "%s%lld.%03lld", ns < 0 ? "-" : "", (long long)(a / 1000), (long long)(a % 1000));
  return buf;
}

constexpr int kLaneStride = 1000;  // tid = kLaneStride x stream + lane
const char* const kStreamNames[] = {"steps", "compute stream", "comm stream", "host data"};

}  // namespace

TraceClock TraceClock::start(const World&) {
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  TraceClock c;
  c.started_ = true;
  c.start_ns_ = realtime_ns();
  return c;
}

void TraceClock::mark_first_step() {
  if (!started_ || marked_) return;
  marked_ = true;
  first_step_ns_ = realtime_ns();
}

std::vector<double> TraceClock::offsets_ms(const World& w) const {
  if (!started_) return w.rank == 0 ? std::vector<double>((size_t)w.world_size, 0.0) : std::vector<double>();
  int64_t t0 = 0;
  MPI_CHECK(MPI_Allreduce(&start_ns_, &t0, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD));
  const int64_t mine = (marked_ ? first_step_ns_ : start_ns_) - t0;
  std::vector<int64_t> all(w.rank == 0 ? (size_t)w.world_size : 0);
  MPI_CHECK(MPI_Gather(&mine, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
  std::vector<double> out;
  for (int64_t ns : all) out.push_back((double)ns / 1e6);
  return out;
}

void ChromeTrace::add(int rank, Thread thread, const std::string& name, double start_ms, double duration_ms) {
  add_span(rank, thread, name, start_ms, start_ms + duration_ms);
}

void ChromeTrace::add_span(int rank, Thread thread, const std::string& name, double begin_ms, double end_ms) {
  const int64_t begin = ms_to_ns(begin_ms);
  events_.push_back({rank, thread, name, begin, std::max<int64_t>(0, ms_to_ns(end_ms) - begin)});
}

void ChromeTrace::add_step(int rank, int step, const StepRecord& r) {
  const double start = r.start_ms;
  add(rank, Steps, "Batch " + std::to_string(step), start, r.step_ms);
  // The compute stream's phases end to end: each ends where the next begins, to the nanosecond.
  const double input_end = start + r.input_wait_ms, fwd_end = input_end + r.forward_ms,
               bwd_end = start + r.backward_end_ms, exposed_end = bwd_end + r.exposed_comm_ms;
  add_span(rank, Compute, "input wait", start, input_end);
  add_span(rank, Compute, "forward", input_end, fwd_end);
  add_span(rank, Compute, "backward", fwd_end, bwd_end);
  add_span(rank, Compute, "exposed comm", bwd_end, exposed_end);
  add_span(rank, Compute, "optimizer step", exposed_end, exposed_end + r.optimizer_ms);
  add_span(rank, HostData, "get batch (wait)", start - r.data_wait_ms, start);
  const BucketTimes& t = r.buckets;
  for (size_t b = 0; b < t.start_ms.size(); ++b) {
    const bool scattered = b < t.reduce_scattered.size() && t.reduce_scattered[b];
    add_span(rank, Comm, (scattered ? "reduce-scatter bucket " : "all-reduce bucket ") + std::to_string(b),
             start + t.start_ms[b], start + t.end_ms[b]);
    if (b < t.allgather_bytes.size() && t.allgather_bytes[b])  // --shard-optimizer, after the optimizer
      add_span(rank, Comm, "all-gather bucket " + std::to_string(b), start + t.allgather_start_ms[b],
               start + t.allgather_end_ms[b]);
  }
}

std::string ChromeTrace::json(int world_size, const std::vector<double>& offsets_ms) const {
  // Absolute times: the rank's offset added; then shifted so that none is negative.
  std::vector<int64_t> ts(events_.size());
  int64_t earliest = 0;
  for (size_t i = 0; i < events_.size(); ++i) {
    const size_t r = (size_t)events_[i].rank;
    ts[i] = events_[i].ts_ns + (r < offsets_ms.size() ? ms_to_ns(offsets_ms[r]) : 0);
    earliest = std::min(earliest, ts[i]);
  }
  for (int64_t& t : ts) t -= earliest;

  // Lanes: per (rank, stream), events in start order (the shorter first on a tie: a zero-length
  // "input wait" before the "forward" that starts with it), each on the first lane whose last
  // event has ended.
  std::vector<size_t> order(events_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return ts[a] != ts[b] ? ts[a] < ts[b] : events_[a].dur_ns < events_[b].dur_ns;
  });
  std::map<std::pair<int, int>, std::vector<int64_t>> lane_end;  // (rank, stream) -> end of each lane
  std::vector<int> tid(events_.size());
  for (size_t i : order) {
    std::vector<int64_t>& ends = lane_end[{events_[i].rank, (int)events_[i].thread}];
    size_t lane = 0;
    while (lane < ends.size() && ends[lane] > ts[i]) ++lane;
    if (lane == ends.size()) ends.push_back(0);
    ends[lane] = ts[i] + events_[i].dur_ns;
    tid[i] = kLaneStride * (int)events_[i].thread + (int)lane;
  }

  std::ostringstream f;
  {
    f << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"clock\":\"microseconds since the earliest rank's start "
         "(CLOCK_REALTIME after MPI_Barrier, MPI_Allreduce MIN); each rank's steps placed at its first step's "
         "host start\"},\"traceEvents\":[\n";
    bool first = true;
    auto sep = [&]() {
      if (!first) f << ",\n";
      first = false;
    };
    for (int r = 0; r < world_size; ++r) {
      sep();
      f << "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" << r << ",\"tid\":0,\"args\":{\"name\":\"rank " << r
        << "\"}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" << r << ",\"tid\":0,\"args\":{\"sort_index\":"
        << r << "}}";
      for (int s = 0; s < 4; ++s) {
        const auto it = lane_end.find({r, s});
        const size_t lanes = it == lane_end.end() ? 1 : it->second.size();
        for (size_t k = 0; k < lanes; ++k) {
          const int t = kLaneStride * s + (int)k;
          const std::string name = k == 0 ? kStreamNames[s] : std::string(kStreamNames[s]) + " lane " + std::to_string(k + 1);
          sep();
          f << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" << r << ",\"tid\":" << t << ",\"args\":{\"name\":\""
            << name << "\"}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" << r << ",\"tid\":" << t
            << ",\"args\":{\"sort_index\":" << t << "}}";
        }
      }
    }
    for (size_t i = 0; i < events_.size(); ++i) {
      const Event& e = events_[i];
      sep();
      f << "{\"name\":\"" << escape(e.name) << "\",\"ph\":\"X\",\"pid\":" << e.rank << ",\"tid\":" << tid[i]
        << ",\"ts\":" << us_text(ts[i]) << ",\"dur\":" << us_text(e.dur_ns) << "}";
    }
    f << "\n]}\n";
  }
  return f.str();
}

void ChromeTrace::write(const std::string& path, int world_size, const std::vector<double>& offsets_ms) const {
  const std::string text = json(world_size, offsets_ms);
  const std::string tmp = path + ".tmp";
  // POSIX calls, so that every failure has its errno; the .tmp is removed on any of them.
  auto fail = [&tmp](const std::string& what, int fd) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error("--trace: " + what + " '" + tmp + "': " + std::strerror(e));
  };
  // The start-up checks refused a scratch file that is a link (output_paths_problem, rule 7).
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", -1);
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write", fd);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("cannot write", fd);
  if (::close(fd) != 0) fail("cannot write", -1);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error("--trace: cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(e));
  }
}

}  // namespace vitddp
