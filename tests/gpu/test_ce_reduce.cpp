// ce_sum_chunk and ce_sum_chunk_16bit (cuda/kernels/ce_reduce.h), the sum kernels of the copy-engine
// all-reduce, on one GPU:
// every element type, chunk offsets 0..7 elements past a 16-byte line (scalar head, 16-byte body,
// scalar tail), 1 and 3 scratch slots, against the host: fp32 sum in slot order, one rounding.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <tuple>
#include <limits>
#include <vector>

#include "cuda/kernels/ce_reduce.h"
#include "mpi/hooks/half_host.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;

namespace {

// Element i of a buffer of type t held as raw bytes, widened to float.
float get(const std::vector<uint8_t>& b, DType t, size_t i) {
  if (t == DType::F32) {
    float f;
    std::memcpy(&f, b.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, b.data() + 2 * i, 2);
  return t == DType::F16 ? fp16_to_float(h) : bf16_to_float(h);
}

void put(std::vector<uint8_t>& b, DType t, size_t i, float v) {
  if (t == DType::F32) return (void)std::memcpy(b.data() + 4 * i, &v, 4);
  const uint16_t h = t == DType::F16 ? float_to_fp16(v) : float_to_bf16(v);
  std::memcpy(b.data() + 2 * i, &h, 2);
}

}  // namespace

TEST_CASE("ce_sum_chunk: fp32 sum of the chunk and its slots, one rounding, at every alignment", "[gpu][ce_reduce]") {
  REQUIRE_GPU();
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int slots : {1, 3})
      for (size_t n : {size_t{1}, size_t{5}, size_t{1000}, size_t{70001}})
        for (size_t off = 0; off < 8; ++off) {
          INFO("dtype " << (int)t << ", slots " << slots << ", n " << n << ", offset " << off);
          const size_t es = dtype_bytes(t);
          const size_t stride = (n + off + 64) / 8 * 8;  // elements; stride * es is a multiple of 16
          const auto a = normal_vec(n, 7, off + 10 * slots, 3.0);
          const auto r = normal_vec(slots * stride, 8, off + 10 * slots, 3.0);
          std::vector<uint8_t> chunk((n + off) * es), scratch((slots * stride + off) * es);
          for (size_t i = 0; i < n; ++i) put(chunk, t, off + i, a[i]);
          for (size_t i = 0; i < slots * stride; ++i) put(scratch, t, off + i, r[i]);
          DevVec<uint8_t> dc(chunk.size()), ds(scratch.size());
          DevVec<int> flag(std::vector<int>{0});
          dc.upload(chunk);
          ds.upload(scratch);
          ce_sum_chunk(dc.get() + off * es, ds.get() + off * es, n, slots, stride, 0.5f, t, s, flag.get());
          CUDA_CHECK(cudaStreamSynchronize(s));
          CHECK(flag.download()[0] == 0);  // finite inputs, finite sums
          const auto out = dc.download();
          std::vector<uint8_t> want = chunk;
          for (size_t i = 0; i < n; ++i) {
            float acc = get(chunk, t, off + i);
            for (int k = 0; k < slots; ++k) acc += get(scratch, t, off + k * stride + i);
            put(want, t, off + i, acc * 0.5f);
          }
          CHECK(out == want);
        }
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("ce_sum_chunk: a NaN, an Inf or an fp16 overflow anywhere sets the non-finite flag", "[gpu][ce_reduce]") {
  REQUIRE_GPU();
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t n = 5003, stride = 5008;
  struct Case {
    DType t;
    size_t at;      // element whose copy in slot 0 is changed
    float value;    // to this
    float chunk;    // every chunk element
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const Case c : {Case{DType::F32, 0, nan, 1.0f}, Case{DType::F32, 2501, inf, 1.0f},
                       Case{DType::F32, n - 1, -inf, 1.0f}, Case{DType::BF16, 77, nan, 1.0f},
                       Case{DType::F16, 4000, 60000.0f, 60000.0f}}) {
    INFO("dtype " << (int)c.t << ", element " << c.at << ", value " << c.value);
    const size_t es = dtype_bytes(c.t);
    std::vector<uint8_t> chunk(n * es), scratch(stride * es);
    for (size_t i = 0; i < n; ++i) put(chunk, c.t, i, c.chunk);
    for (size_t i = 0; i < stride; ++i) put(scratch, c.t, i, 0.0f);
    put(scratch, c.t, c.at, c.value);
    DevVec<uint8_t> dc(chunk.size()), ds(scratch.size());
    DevVec<int> flag(std::vector<int>{0});
    dc.upload(chunk);
    ds.upload(scratch);
    // fp16: 60000 + 60000 = 120000 > 65504 rounds to inf (scale 1, as the 16-bit hooks' sum).
    ce_sum_chunk(dc.get(), ds.get(), n, 1, stride, 1.0f, c.t, s, flag.get());
    CUDA_CHECK(cudaStreamSynchronize(s));
    CHECK(flag.download()[0] == 1);
  }
  DevVec<int> flags(std::vector<int>{0, 0, 1}), out(std::vector<int>{0});
  ce_or_flags(flags.get(), 2, out.get(), s);  // only the first two count
  CUDA_CHECK(cudaStreamSynchronize(s));
  CHECK(out.download()[0] == 0);
  ce_or_flags(flags.get(), 3, out.get(), s);
  CUDA_CHECK(cudaStreamSynchronize(s));
  CHECK(out.download()[0] == 1);
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("ce_max_slots: the maximum of the first n slots, written over one of them", "[gpu][ce_reduce]") {
  REQUIRE_GPU();
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DevVec<int> slots(std::vector<int>{-3, 7, 2, 9}), out(std::vector<int>{100});
  ce_max_slots(slots.get(), 3, out.get(), s);  // the 9 lies past n
  CUDA_CHECK(cudaStreamSynchronize(s));
  CHECK(out.download()[0] == 7);
  ce_max_slots(slots.get(), 1, out.get(), s);
  CUDA_CHECK(cudaStreamSynchronize(s));
  CHECK(out.download()[0] == -3);
  ce_max_slots(slots.get(), 4, slots.get() + 2, s);  // in place, as max_over_ranks' own slot
  CUDA_CHECK(cudaStreamSynchronize(s));
  CHECK(slots.download() == std::vector<int>{-3, 7, 9, 9});
  CHECK_THROWS_AS(ce_max_slots(slots.get(), 0, out.get(), s), std::invalid_argument);
  CUDA_CHECK(cudaStreamDestroy(s));
}

TEST_CASE("ce_sum_chunk_16bit: the 16-bit hooks' cast, sum and cast back in one pass, bit for bit",
          "[gpu][ce_reduce]") {
  REQUIRE_GPU();
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // off 0: 16-byte vectors plus a tail; off 1..3: element by element (x not 16-byte aligned).
  // Divisor 3 (3 ranks) rounds where 1/3 x would not: a true division, as the hooks.
  for (DType t : {DType::F16, DType::BF16})
    for (int slots : {1, 3})
      for (size_t n : {size_t{1}, size_t{13}, size_t{70001}})
        for (size_t off : {size_t{0}, size_t{1}, size_t{3}}) {
          const float divisor = slots == 1 ? 2.0f : 3.0f;
          INFO("dtype " << (int)t << ", slots " << slots << ", n " << n << ", offset " << off);
          const size_t stride = (n + off + 64) / 8 * 8;
          const auto x = normal_vec(n, 9, off + 10 * slots, 3.0);
          const auto r = normal_vec(slots * stride, 10, off + 10 * slots, 1.5);
          std::vector<uint8_t> scratch((slots * stride + off) * 2);
          for (size_t i = 0; i < slots * stride; ++i) put(scratch, t, off + i, r[i]);
          std::vector<float> xs(n + off, 0.0f);
          std::copy(x.begin(), x.end(), xs.begin() + off);
          DevVec<float> dx(xs.size());
          DevVec<uint8_t> ds(scratch.size()), dout((n + off) * 2);
          DevVec<int> flag(std::vector<int>{0});
          dx.upload(xs);
          ds.upload(scratch);
          ce_sum_chunk_16bit(dx.get() + off, reinterpret_cast<uint16_t*>(dout.get()) + off,
                             reinterpret_cast<const uint16_t*>(ds.get()) + off, n, slots, stride, divisor, t, s,
                             flag.get());
          CUDA_CHECK(cudaStreamSynchronize(s));
          CHECK(flag.download()[0] == 0);
          // Host: own = 16-bit(x / divisor), sum in fp32 with the slots in order, one rounding to
          // 16 bits; compared as bits (16-bit payload and fp32 value).
          std::vector<uint16_t> own(n), want16(n);
          cast_to_16bit_host(t, x.data(), n, static_cast<int>(divisor), own.data());
          std::vector<float> acc(n), want_x(n);
          cast_from_16bit_host(t, own.data(), n, acc.data());
          for (size_t i = 0; i < n; ++i)
            for (int k = 0; k < slots; ++k) acc[i] += get(scratch, t, off + k * stride + i);
          cast_to_16bit_host(t, acc.data(), n, 1, want16.data());
          cast_from_16bit_host(t, want16.data(), n, want_x.data());
          const auto got_x = dx.download();
          const auto got16 = dout.download();
          CHECK(std::memcmp(got_x.data() + off, want_x.data(), n * sizeof(float)) == 0);
          CHECK(std::memcmp(got16.data() + 2 * off, want16.data(), n * 2) == 0);
        }
  // A NaN or Inf anywhere (a peer's copy or the own value; in the vector body, the tail, or the
  // element-by-element path), and an fp16 overflow of the sum, set the flag.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    DType t;
    size_t at, off;  // poisoned element; x's offset from 16-byte alignment (1: no vectors)
    float own, peer;  // x[at] and the peer's copy of it; every other x is 1, every other copy 0
  };
  for (const Case c : {Case{DType::BF16, 500, 0, 1.0f, nan}, Case{DType::BF16, 1002, 0, inf, 0.0f},
                       Case{DType::F16, 7, 1, nan, 0.0f}, Case{DType::F16, 500, 0, 120000.0f, 60000.0f}}) {
    INFO("dtype " << (int)c.t << ", element " << c.at << ", offset " << c.off << ", own " << c.own << ", peer "
                  << c.peer);
    const size_t n = 1003, stride = 1008;  // n % 8 == 3: elements 1000..1002 are the tail
    std::vector<uint8_t> scratch(stride * dtype_bytes(c.t));  // 2 bytes: these cases are 16-bit
    for (size_t i = 0; i < stride; ++i) put(scratch, c.t, i, 0.0f);
    put(scratch, c.t, c.at, c.peer);
    std::vector<float> hx(n + c.off, 1.0f);
    hx[c.off + c.at] = c.own;
    DevVec<float> dx(hx);
    DevVec<uint8_t> ds(scratch.size()), dout((n + c.off) * 2);
    DevVec<int> flag(std::vector<int>{0});
    ds.upload(scratch);
    // fp16: 120000 / 2 = 60000, plus 60000 = 120000 > 65504 rounds to inf.
    ce_sum_chunk_16bit(dx.get() + c.off, reinterpret_cast<uint16_t*>(dout.get()) + c.off,
                       reinterpret_cast<const uint16_t*>(ds.get()), n, 1, stride, 2.0f, c.t, s, flag.get());
    CUDA_CHECK(cudaStreamSynchronize(s));
    CHECK(flag.download()[0] == 1);
  }
  CHECK_THROWS_AS(ce_sum_chunk_16bit(nullptr, nullptr, nullptr, 1, 1, 8, 2.0f, DType::F32, s), std::invalid_argument);
  CUDA_CHECK(cudaStreamDestroy(s));
}
