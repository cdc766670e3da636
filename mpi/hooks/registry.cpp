// The comm hooks by --compression value. A new hook is one file under mpi/hooks/ with its
// factory, plus one line here.
#include <stdexcept>

#include "mpi/hooks/comm_hook.h"

namespace vitddp {

const std::vector<CommHookEntry>& comm_hook_registry() {
  static const std::vector<CommHookEntry> entries = {
      {"none", &make_allreduce_hook},
      {"fp16", &make_fp16_compress_hook},
      {"bf16", &make_bf16_compress_hook},
      {"powersgd", &make_powersgd_hook},
  };
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
