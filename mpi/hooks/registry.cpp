// The comm hooks by --compression value. A new hook is one file under mpi/hooks/ defining its
// factory `std::unique_ptr<CommHook> make_..._hook(const HookArgs&)`, plus one line in the list
// (and one in the sharded list when it has a form for --shard-optimizer).
#include <stdexcept>

#include "mpi/hooks/comm_hook.h"

// X(--compression value, factory), in --help order.
#define VITDDP_COMM_HOOKS(X)                 \
  X("none", make_allreduce_hook)             \
  X("fp16", make_fp16_compress_hook)         \
  X("bf16", make_bf16_compress_hook)         \
  X("powersgd", make_powersgd_hook)

// X(--compression value, factory) of the sharded forms (--shard-optimizer, ZeRO-1: the gradients
// reduce-scattered instead of all-reduced). fp16/bf16 and PowerSGD have none (validate_options
// refuses them with the reason).
#define VITDDP_SHARDED_COMM_HOOKS(X)         \
  X("none", make_reduce_scatter_hook)

namespace vitddp {

#define VITDDP_DECLARE_HOOK(name, factory) std::unique_ptr<CommHook> factory(const HookArgs& args);
VITDDP_COMM_HOOKS(VITDDP_DECLARE_HOOK)
VITDDP_SHARDED_COMM_HOOKS(VITDDP_DECLARE_HOOK)
#undef VITDDP_DECLARE_HOOK

#define VITDDP_HOOK_ENTRY(name, factory) {name, &factory},
const std::vector<CommHookEntry>& comm_hook_registry() {
  static const std::vector<CommHookEntry> entries = {VITDDP_COMM_HOOKS(VITDDP_HOOK_ENTRY)};
  return entries;
}

const std::vector<CommHookEntry>& sharded_comm_hook_registry() {
  static const std::vector<CommHookEntry> entries = {VITDDP_SHARDED_COMM_HOOKS(VITDDP_HOOK_ENTRY)};
  return entries;
}
#undef VITDDP_HOOK_ENTRY

std::vector<std::string> compression_names() {
  std::vector<std::string> v;
  for (const CommHookEntry& e : comm_hook_registry()) v.emplace_back(e.name);
  return v;
}

std::unique_ptr<CommHook> make_comm_hook(const std::string& name, const HookArgs& args) {
  bool known = false;
  for (const CommHookEntry& e : comm_hook_registry()) known = known || name == e.name;
  if (!known)
    throw std::invalid_argument("unknown compression '" + name + "' (choose one of: " +
                                join_names(compression_names()) + ")");
  if (!args.options.shard_optimizer) {
    for (const CommHookEntry& e : comm_hook_registry())
      if (name == e.name) return e.make(args);
  }
  std::vector<std::string> sharded;
  for (const CommHookEntry& e : sharded_comm_hook_registry()) {
    if (name == e.name) return e.make(args);
    sharded.emplace_back(e.name);
  }
  throw std::invalid_argument("compression '" + name + "' has no sharded form (--shard-optimizer takes: " +
                              join_names(sharded) + ")");
}

}  // namespace vitddp
