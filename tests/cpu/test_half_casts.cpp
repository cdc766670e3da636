// The host 16-bit casts of the comm hooks (mpi/hooks/half_host.h) against the compiler's own IEEE
// binary16 type (_Float16, GCC >= 12 on x86-64: conversions round to nearest even) and against
// bfloat16 as the top half of a float rounded to nearest even, computed in double.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "mpi/hooks/half_host.h"
#include "tests/catch.h"

namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// f(x) for a fixed pseudo-random sample of 2 million float bit patterns (every sign, exponent
/// and rounding case; NaN and inf included).
template <typename F>
void for_random_floats(F&& f) {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 2000000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    f(float_of(static_cast<uint32_t>(s >> 32)));
  }
}

}  // namespace

TEST_CASE("fp16 casts match the compiler's _Float16 (round to nearest even)", "[hooks][casts]") {
  // Every binary16 value: exact both ways (NaN: the float NaN).
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    _Float16 v;
    const uint16_t h16 = static_cast<uint16_t>(h);
    std::memcpy(&v, &h16, sizeof v);
    const float want = static_cast<float>(v);
    const float got = vitddp::fp16_to_float(h16);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
      REQUIRE(bits_of(got) == 0x7fffffffu);  // CUDA's __half2float: NaN without sign
    } else {
      REQUIRE(bits_of(got) == bits_of(want));
      REQUIRE(vitddp::float_to_fp16(want) == h16);  // and back
    }
  }
  // Midpoints between neighbouring binary16 values and their float neighbours, then a sample.
  auto check = [](float x) {
    const uint16_t got = vitddp::float_to_fp16(x);
    if (std::isnan(x)) {
      REQUIRE(got == 0x7fffu);
      return;
    }
    const _Float16 v = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &v, sizeof want);
    INFO("x = " << x << " (bits " << bits_of(x) << ")");
    REQUIRE(got == want);
  };
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const float lo = vitddp::fp16_to_float(static_cast<uint16_t>(h));
    const float hi = h + 1 < 0x7c00u ? vitddp::fp16_to_float(static_cast<uint16_t>(h + 1)) : 65536.0f;
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);  // exact in float
    for (float x : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      check(x);
      check(-x);
    }
  }
  for_random_floats(check);
  check(std::numeric_limits<float>::infinity());
  check(-std::numeric_limits<float>::infinity());
  check(std::numeric_limits<float>::denorm_min());
}

TEST_CASE("bf16 casts: the float's top 16 bits rounded to nearest even", "[hooks][casts]") {
  auto check = [](float x) {
    const uint16_t got = vitddp::float_to_bf16(x);
    if (std::isnan(x)) {
      REQUIRE(got == 0x7fffu);  // CUDA's __float2bfloat16_rn: the canonical NaN
      return;
    }
    // Reference in double: the two bfloat16 neighbours of x, the nearer (ties: even mantissa).
    const uint32_t u = bits_of(x);
    const uint16_t down = static_cast<uint16_t>(u >> 16);
    const uint16_t up = static_cast<uint16_t>(down + 1);
    const double dx = std::fabs(static_cast<double>(x));
    const double dd = dx - std::fabs(static_cast<double>(vitddp::bf16_to_float(down)));
    const double du = (down & 0x7fffu) == 0x7f7fu ? std::ldexp(1.0, 128) - dx  // past the max: inf (2^128)
                                                  : std::fabs(static_cast<double>(vitddp::bf16_to_float(up))) - dx;
    uint16_t want = dd < du || (dd == du && (down & 1u) == 0) ? down : up;
    if ((u & 0x7fffffffu) == 0x7f800000u) want = down;  // inf stays inf
    INFO("x = " << x << " (bits " << u << ")");
    REQUIRE(got == want);
    REQUIRE(vitddp::bf16_to_float(got) == (want == down ? vitddp::bf16_to_float(down) : vitddp::bf16_to_float(up)));
  };
  // Each bfloat16 value's float, the ties to the next value and their neighbours, then a sample.
  for (uint32_t h = 0; h < 0x10000u; ++h)
    for (uint32_t d : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) check(float_of((h << 16) + d));
  for_random_floats(check);
  check(std::numeric_limits<float>::infinity());
  check(-std::numeric_limits<float>::max());
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = float_of(h << 16);
    if (!std::isnan(f)) REQUIRE(bits_of(vitddp::bf16_to_float(static_cast<uint16_t>(h))) == (h << 16));
  }
}
