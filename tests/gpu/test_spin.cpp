// The waiting kernels of cuda/kernels/spin.h: HostGate holds a stream until the host opens it (or
// until its cycle limit), so that launches enqueued meanwhile run back to back after it.
#include <cuda_runtime.h>

#include <chrono>
#include <thread>

#include "cuda/kernels/spin.h"
#include "tests/catch.h"
#include "tests/gpu/gpu_test_util.h"

using namespace vitddp;
using namespace vitddp_test;

TEST_CASE("spin: HostGate holds the stream until opened, then what queued behind it runs", "[gpu][spin]") {
  REQUIRE_GPU();
  Stream st;
  int clock_khz = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  EventPair ev;
  HostGate gate((long long)clock_khz * 10000);  // about 10 s at the peak clock: far beyond the test's waits
  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    gate.close(st.s);
    ev.record_start(st.s);
    spin_cycles((long long)clock_khz / 100, 1, 32, st.s);  // ~10 us of work behind the gate
    ev.record_stop(st.s);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(cudaEventQuery(ev.start) == cudaErrorNotReady);  // still held after 50 ms
    const auto opened = std::chrono::steady_clock::now();
    gate.open();
    CUDA_CHECK(cudaEventSynchronize(ev.stop));
    const double wait_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - opened).count();
    CHECK(wait_ms < 1000.0);  // released by open(), not by the 10-s limit
    CHECK_FALSE(gate.timed_out());
    CHECK(ev.elapsed_ms() < 5.0f);  // the work behind the gate ran alone, without the 50 ms of holding
  }
}

TEST_CASE("spin: a HostGate never opened lets the stream go at its cycle limit and says so", "[gpu][spin]") {
  REQUIRE_GPU();
  Stream st;
  int clock_khz = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  HostGate gate((long long)clock_khz * 5);  // about 5 ms at the peak clock
  gate.close(st.s);
  const auto t0 = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaStreamSynchronize(st.s));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(gate.timed_out());
  CHECK(ms >= 4.0);
  CHECK(ms < 1000.0);
  CHECK_THROWS_AS(HostGate(0), std::invalid_argument);
}
