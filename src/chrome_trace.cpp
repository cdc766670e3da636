#include "src/chrome_trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

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
}  // namespace

void ChromeTrace::add(int rank, Thread thread, const std::string& name, double start_ms, double duration_ms) {
  events_.push_back({rank, thread, name, start_ms * 1e3, duration_ms * 1e3});
}

void ChromeTrace::add_step(int rank, int step, const StepRecord& r) {
  const double start = r.start_ms, input = r.input_wait_ms, fwd = r.forward_ms, bwd_end = r.backward_end_ms;
  add(rank, Steps, "Batch " + std::to_string(step), start, r.step_ms);
  add(rank, Compute, "input wait", start, input);
  add(rank, Compute, "forward", start + input, fwd);
  add(rank, Compute, "backward", start + input + fwd, bwd_end - input - fwd);
  add(rank, Compute, "exposed comm", start + bwd_end, r.exposed_comm_ms);
  add(rank, Compute, "optimizer step", start + bwd_end + r.exposed_comm_ms, r.optimizer_ms);
  add(rank, HostData, "get batch (wait)", start - r.data_wait_ms, r.data_wait_ms);
  const BucketTimes& t = r.buckets;
  for (size_t b = 0; b < t.start_ms.size(); ++b)
    add(rank, Comm, "all-reduce bucket " + std::to_string(b), start + t.start_ms[b], t.end_ms[b] - t.start_ms[b]);
}

std::string ChromeTrace::json(int world_size) const {
  std::string f = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  const char* threads[] = {"steps", "compute stream", "comm stream", "host data"};
  bool first = true;
  auto sep = [&]() {
    if (!first) f += ",\n";
    first = false;
  };
  for (int r = 0; r < world_size; ++r) {
    const std::string pid = std::to_string(r);
    sep();
    f += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":\"rank " + pid + "\"}}";
    for (int t = 0; t < 4; ++t) {
      sep();
      f += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(t) +
           ",\"args\":{\"name\":\"" + threads[t] + "\"}}";
    }
  }
  char num[64];
  for (const auto& e : events_) {
    sep();
    std::snprintf(num, sizeof(num), "\"ts\":%.3f,\"dur\":%.3f", e.ts_us, e.dur_us);
    f += "{\"name\":\"" + escape(e.name) + "\",\"ph\":\"X\",\"pid\":" + std::to_string(e.rank) +
         ",\"tid\":" + std::to_string(static_cast<int>(e.thread)) + "," + num + "}";
  }
  f += "\n]}\n";
  return f;
}

void ChromeTrace::write(const std::string& path, int world_size) const {
  const std::string text = json(world_size);
  const std::string tmp = path + ".tmp";
  // POSIX calls, so that every failure has its errno; the .tmp is removed on any of them.
  auto fail = [&tmp](const std::string& what, int fd) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw std::runtime_error("--trace: " + what + " '" + tmp + "': " + std::strerror(e));
  };
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
