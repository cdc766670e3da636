// ZeRO-1's exchange of a bucket (--shard-optimizer; Rajbhandari et al. 2020, stage 1; Megatron-LM's
// distributed optimizer): the fp32 bucket averaged over the ranks by the transport, in place, each
// rank receiving only its chunk (mpi/buckets/shard_plan.h) where it lies in the bucket. The sharded
// form of allreduce_hook.
#include "mpi/hooks/comm_hook.h"

namespace vitddp {

namespace {

class ReduceScatterHook final : public CommHook {
 public:
  const char* name() const override { return "none"; }
  const char* collective() const override { return "reduce-scatter"; }
  void run(GradBucket& b) override { b.reduce_scatter(b.buffer(), b.numel(), DType::F32, ReduceOp::Avg); }
};

}  // namespace

/// The registry's factory (mpi/hooks/registry.cpp, the sharded list).
std::unique_ptr<CommHook> make_reduce_scatter_hook(const HookArgs&) { return std::make_unique<ReduceScatterHook>(); }

}  // namespace vitddp
