// The comm hooks by --compression value. A new hook is one file under mpi/hooks/ defining its
// factory `std::unique_ptr<CommHook> make_..._hook(const HookArgs&)`, plus one line in the list.
#include <stdexcept>

#include "mpi/hooks/comm_hook.h"

// X(--compression value, factory), in --help order.
#define VITDDP_COMM_HOOKS(X)                 \
  X("none", make_allreduce_hook)             \
  X("fp16", make_fp16_compress_hook)         \
  X("bf16", make_bf16_compress_hook)         \
  X("powersgd", make_powersgd_hook)

namespace vitddp {

#define VITDDP_DECLARE_HOOK(name, factory) std::unique_ptr<CommHook> factory(const HookArgs& args);
VITDDP_COMM_HOOKS(VITDDP_DECLARE_HOOK)
#undef VITDDP_DECLARE_HOOK

const std::vector<CommHookEntry>& comm_hook_registry() {
#define VITDDP_HOOK_ENTRY(name, factory) {name, &factory},
  static const std::vector<CommHookEntry> entries = {VITDDP_COMM_HOOKS(VITDDP_HOOK_ENTRY)};
#undef VITDDP_HOOK_ENTRY
  return entries;
}

std::vector<std::string> compression_names() {
  std::vector<std::string> v;
  for (const CommHookEntry& e : comm_hook_registry()) v.emplace_back(e.name);
  return v;
}

std::unique_ptr<CommHook> make_comm_hook(const std::string& name, const HookArgs& args) {
  for (const CommHookEntry& e : comm_hook_registry())
    if (name == e.name) return e.make(args);
  throw std::invalid_argument("unknown compression '" + name + "' (choose one of: " + join_names(compression_names()) +
                              ")");
}

}  // namespace vitddp
