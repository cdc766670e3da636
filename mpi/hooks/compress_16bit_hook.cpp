#include "mpi/hooks/compress_16bit_hook.h"

namespace vitddp {

namespace {

class Compress16BitHook final : public CommHook {
 public:
  explicit Compress16BitHook(DType t) : t_(t) { require_16bit(t, "16-bit compression hook"); }
  const char* name() const override { return dtype_name(t_); }
  bool uses_16bit_staging() const override { return true; }

  void run(GradBucket& b) override {
    const float ws = static_cast<float>(b.world_size());
    float* x = b.buffer();
    const size_t n = b.numel();
    uint16_t* half = b.staging_16bit();
    b.set_compressed(true);
    if (b.all_reduce_16bit_fused(x, half, n, t_, ws)) return;
    const int e0 = b.mark();
    b.cast_to_16bit(x, n, ws, t_, half);
    b.compress(e0, b.mark());
    b.all_reduce(half, n, t_, ReduceOp::Sum);
    const DType t = t_;
    b.then([&b, half, x, n, t] {
      const int e2 = b.last_mark();  // the all-reduce's completion
      b.cast_from_16bit(half, n, t, x);
      b.compress(e2, b.mark());
    });
  }

 private:
  DType t_;
};

}  // namespace

std::unique_ptr<CommHook> make_compress_16bit_hook(DType t) { return std::make_unique<Compress16BitHook>(t); }

}  // namespace vitddp
