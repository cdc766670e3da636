// bf16_compress_hook (PyTorch default_hooks.py): the bucket all-reduced in bfloat16.
#include "mpi/hooks/compress_16bit_hook.h"

namespace vitddp {

/// The registry's factory (mpi/hooks/registry.cpp).
std::unique_ptr<CommHook> make_bf16_compress_hook(const HookArgs&) { return make_compress_16bit_hook(DType::BF16); }

}  // namespace vitddp
