#include "mpi/reducer/reducer_options.h"

#include <stdexcept>

namespace vitddp {

std::vector<HookBucket> hook_buckets(const ParamLayout& layout, const std::vector<Bucket>& buckets) {
  std::vector<HookBucket> out;
  out.reserve(buckets.size());
  for (const Bucket& b : buckets) {
    HookBucket hb;
    hb.numel = b.numel;
    for (size_t pi : b.params) {
      const ParamInfo& p = layout.params.at(pi);
      if (p.offset < b.offset || p.offset + p.numel > b.offset + b.numel)
        throw std::logic_error("hook_buckets: parameter " + p.name + " lies outside bucket " +
                               std::to_string(b.index));
      hb.tensors.push_back(HookTensor{p.offset - b.offset, p.shape, p.numel});
    }
    out.push_back(std::move(hb));
  }
  return out;
}

std::string powersgd_never_compresses_warning(const ReducerOptions& o, int64_t total_steps) {
  if (o.compression != "powersgd" || o.powersgd.start_iter < total_steps) return "";
  const std::string s = std::to_string(o.powersgd.start_iter);
  return "PowerSGD would never compress in this run: PyTorch's default start_powerSGD_iter=1000 "
         "defers compression, and --powersgd-start-step " + s + " is >= the run's " +
         std::to_string(total_steps) +
         " steps (--warmup-steps + --steps + --cooldown-steps), so every bucket is all-reduced "
         "uncompressed in fp32 (vanilla all-reduce); pass e.g. --powersgd-start-step 2 to compress";
}

}  // namespace vitddp
