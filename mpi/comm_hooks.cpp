#include "mpi/comm_hooks.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>

#include "mpi/world.h"

namespace vitddp {

std::string compression_name(Compression c) {
  switch (c) {
    case Compression::None: return "none";
    case Compression::Fp16: return "fp16";
    case Compression::Bf16: return "bf16";
    case Compression::PowerSgd: return "powersgd";
  }
  return "?";
}

std::vector<std::string> compression_names() { return {"none", "fp16", "bf16", "powersgd"}; }

Compression parse_compression(const std::string& name) {
  for (Compression c : {Compression::None, Compression::Fp16, Compression::Bf16, Compression::PowerSgd})
    if (compression_name(c) == name) return c;
  throw std::invalid_argument("unknown compression '" + name + "' (choose one of: none, fp16, bf16, powersgd)");
}

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

// ---------------------------------------------------------------- 16-bit casts
// CUDA's conversion functions are __host__ __device__: using them here makes the host path
// bit-identical to the GPU kernels (cuda/compression.cu).

uint16_t float_to_fp16(float x) {
  const __half_raw r = __float2half_rn(x);
  return r.x;
}

float fp16_to_float(uint16_t h) {
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}

uint16_t float_to_bf16(float x) {
  const __nv_bfloat16_raw r = __float2bfloat16_rn(x);
  return r.x;
}

float bf16_to_float(uint16_t h) {
  __nv_bfloat16_raw r;
  r.x = h;
  return __bfloat162float(__nv_bfloat16(r));
}

void cast_to_16bit_host(Compression c, const float* x, size_t n, int world_size, uint16_t* out) {
  const float ws = static_cast<float>(world_size);
  if (c == Compression::Fp16) {
    for (size_t i = 0; i < n; ++i) out[i] = float_to_fp16(x[i] / ws);
  } else if (c == Compression::Bf16) {
    for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(x[i] / ws);
  } else {
    throw std::invalid_argument("cast_to_16bit_host: compression must be fp16 or bf16, got " + compression_name(c));
  }
}

void cast_from_16bit_host(Compression c, const uint16_t* h, size_t n, float* x) {
  if (c == Compression::Fp16) {
    for (size_t i = 0; i < n; ++i) x[i] = fp16_to_float(h[i]);
  } else if (c == Compression::Bf16) {
    for (size_t i = 0; i < n; ++i) x[i] = bf16_to_float(h[i]);
  } else {
    throw std::invalid_argument("cast_from_16bit_host: compression must be fp16 or bf16, got " + compression_name(c));
  }
}

// ---------------------------------------------------------------- MPI 16-bit sums

namespace {

// MPI_User_function: inout[i] = round16(float(in[i]) + float(inout[i])).
void fp16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_fp16(fp16_to_float(a[i]) + fp16_to_float(b[i]));
}

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

}  // namespace

Mpi16BitSumOps::Mpi16BitSumOps() {
  MPI_CHECK(MPI_Op_create(&fp16_sum, 1, &fp16_));
  MPI_CHECK(MPI_Op_create(&bf16_sum, 1, &bf16_));
}

Mpi16BitSumOps::~Mpi16BitSumOps() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (fp16_ != MPI_OP_NULL) MPI_Op_free(&fp16_);
  if (bf16_ != MPI_OP_NULL) MPI_Op_free(&bf16_);
}

MPI_Op Mpi16BitSumOps::op(Compression c) const {
  if (c == Compression::Fp16) return fp16_;
  if (c == Compression::Bf16) return bf16_;
  throw std::invalid_argument("Mpi16BitSumOps: compression must be fp16 or bf16, got " + compression_name(c));
}

std::string powersgd_never_compresses_warning(const ReducerOptions& o, int64_t total_steps) {
  if (o.compression != Compression::PowerSgd || o.powersgd.start_iter < total_steps) return "";
  const std::string s = std::to_string(o.powersgd.start_iter);
  return "PowerSGD would never compress in this run: PyTorch's default start_powerSGD_iter=1000 "
         "defers compression, and --powersgd-start-step " + s + " is >= the run's " +
         std::to_string(total_steps) +
         " steps (--warmup-steps + --steps + --cooldown-steps), so every bucket is all-reduced "
         "uncompressed in fp32 (vanilla all-reduce); pass e.g. --powersgd-start-step 2 to compress";
}

}  // namespace vitddp
