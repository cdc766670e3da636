// allreduce_hook (torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py): DDP's default,
// the fp32 bucket averaged in place by the transport.
#include "mpi/hooks/comm_hook.h"

namespace vitddp {

namespace {

class AllReduceHook final : public CommHook {
 public:
  const char* name() const override { return "none"; }
  void run(GradBucket& b) override { b.all_reduce(b.buffer(), b.numel(), DType::F32, ReduceOp::Avg); }
};

}  // namespace

/// The registry's factory (mpi/hooks/registry.cpp).
std::unique_ptr<CommHook> make_allreduce_hook(const HookArgs&) { return std::make_unique<AllReduceHook>(); }

}  // namespace vitddp
