#include "src/memory_estimate.h"

#include <cstdint>
#include <cstdio>

namespace vitddp {

size_t MemoryEstimate::persistent_bytes() const {
  size_t n = 0;
  for (const auto& i : items) n += i.bytes;
  return n;
}

size_t MemoryEstimate::peak_bytes() const { return persistent_bytes() + transient.bytes; }

size_t MemoryEstimate::bytes_of(const std::string& what) const {
  for (const auto& i : items)
    if (i.what == what) return i.bytes;
  return transient.what == what ? transient.bytes : 0;
}

std::string gib(size_t bytes) {
  char buf[32];
  const double g = bytes / 1073741824.0;
  if (bytes == 0) return "0";
  std::snprintf(buf, sizeof(buf), g >= 10 ? "%.1f" : "%.2f", g);
  return buf;
}

std::string memory_summary(const MemoryEstimate& e) {
  std::string s = e.model + " at batch " + std::to_string(e.batch) + ", " + e.precision + " needs " +
                  gib(e.peak_bytes()) + " GiB in all (";
  for (size_t i = 0; i < e.items.size(); ++i) s += (i ? ", " : "") + e.items[i].what + " " + gib(e.items[i].bytes);
  if (e.transient.bytes) s += ", " + e.transient.what + " " + gib(e.transient.bytes) + " while tuning";
  return s + "; GiB)";
}

std::string memory_report(const MemoryEstimate& e) {
  std::string s = "[vitddp] device memory per rank of the GPU backend: " + e.model + " (" +
                  std::to_string(e.parameter_count) + " parameters), batch " + std::to_string(e.batch) + ", " +
                  e.precision + "\n";
  char line[512];
  auto row = [&](const MemoryItem& i) {
    std::snprintf(line, sizeof(line), "  %-20s %15zu bytes %9s GiB  %s\n", i.what.c_str(), i.bytes, gib(i.bytes).c_str(),
                  i.detail.c_str());
    s += line;
  };
  for (const auto& i : e.items) row(i);
  row(e.transient);
  std::snprintf(line, sizeof(line), "  %-20s %15zu bytes %9s GiB  allocated while training (EngineInfo device_bytes)\n",
                "persistent", e.persistent_bytes(), gib(e.persistent_bytes()).c_str());
  s += line;
  std::snprintf(line, sizeof(line), "  %-20s %15zu bytes %9s GiB  the most at any time\n", "peak", e.peak_bytes(),
                gib(e.peak_bytes()).c_str());
  s += line;
  s += "  not counted: the CUDA context (about 0.5 GiB), NCCL's buffers, cudaMalloc's rounding to 2 MiB pages\n";
  return s;
}

std::string out_of_memory_message(const MemoryEstimate& e, size_t free_bytes, size_t total_bytes) {
  if (e.peak_bytes() <= free_bytes) return "";
  std::vector<MemoryItem> order = e.items;
  order.push_back(e.transient);
  size_t left = free_bytes;
  const MemoryItem* culprit = &order.back();
  for (const auto& i : order) {
    if (i.bytes > left) {
      culprit = &i;
      break;
    }
    left -= i.bytes;
  }
  return "out of GPU memory allocating " + culprit->what + " (" + gib(culprit->bytes) + " GiB): " + memory_summary(e) +
         " but cudaMemGetInfo reports " + gib(free_bytes) + " GiB free of " + gib(total_bytes) + " GiB";
}

}  // namespace vitddp
