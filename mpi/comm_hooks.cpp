#include "mpi/comm_hooks.h"

#include <cstring>
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
// Bit for bit what CUDA's host paths of __float2half_rn, __half2float, __float2bfloat16_rn and
// __bfloat162float compute (cuda_fp16.hpp, cuda_bf16.hpp; the GPU kernels of cuda/compression.cu
// round the same way): IEEE 754 round to nearest even, NaN -> the canonical NaN 0x7fff, a binary16
// NaN -> the float NaN 0x7fffffff. Written out so that the CPU backend needs no CUDA header; the
// test "16-bit casts match CUDA's" (tests/cpu/test_half_casts_gpu.cpp) compares them with CUDA's.

namespace {

uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// `value` >> `shift` rounded to nearest even on the bits shifted out (1 <= shift <= 31).
uint32_t shift_round_even(uint32_t value, unsigned shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

}  // namespace

uint16_t float_to_fp16(float x) {
  const uint32_t u = float_bits(x) & 0x7fffffffu;
  const uint32_t sign = (float_bits(x) >> 16) & 0x8000u;
  if (u > 0x7f800000u) return 0x7fffu;                           // NaN
  if (u >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 (rounds past 65504) or inf
  if (u >= 0x38800000u)                                          // normal binary16 (>= 2^-14): rebias 127 -> 15
    return static_cast<uint16_t>(sign | shift_round_even(u - 0x38000000u, 13));
  if (u <= 0x33000000u) return static_cast<uint16_t>(sign);      // <= 2^-25: rounds to zero
  // Subnormal binary16: units of 2^-24; the float is (1.m) 2^(e-127) = (m | 2^23) 2^(e-150).
  const uint32_t e = u >> 23;
  return static_cast<uint16_t>(sign | shift_round_even((u & 0x7fffffu) | 0x800000u, 126u - e));
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return bits_float(m ? 0x7fffffffu : sign | 0x7f800000u);  // NaN (sign dropped) / inf
  if (e != 0) return bits_float(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return bits_float(sign);
  uint32_t fe = 113u;  // subnormal: normalise m 2^-24
  while (!(m & 0x400u)) {
    m <<= 1;
    --fe;
  }
  return bits_float(sign | (fe << 23) | ((m & 0x3ffu) << 13));
}

uint16_t float_to_bf16(float x) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // NaN
  return static_cast<uint16_t>(shift_round_even(u, 16));  // a carry into the exponent is the right result (inf too)
}

float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

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
