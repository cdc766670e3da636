// lowest_rank_error / agree_or_report under mpirun -np 2: every rank learns the lowest failing
// rank's message.
#include <string>

#include "src/app/rank_agreement.h"
#include "tests/catch.h"
#include "tests/mpi_test_util.h"

using vitddp::lowest_rank_error;

TEST_CASE("lowest_rank_error: every rank gets the lowest failing rank's message", "[mpi][agreement]") {
  const int rank = vitddp_test::world_rank(), size = vitddp_test::world_size();
  REQUIRE(size >= 2);
  CHECK(lowest_rank_error("") == "");
  // Only the last rank fails: rank 0 (which prints) learns its message.
  CHECK(lowest_rank_error(rank == size - 1 ? "--data: bad on the last rank" : "") == "--data: bad on the last rank");
  // Every rank fails with its own message: rank 0's wins everywhere.
  CHECK(lowest_rank_error("rank " + std::to_string(rank)) == "rank 0");
  // Ranks 1.. fail: rank 1's wins.
  CHECK(lowest_rank_error(rank >= 1 ? "rank " + std::to_string(rank) + " failed" : "") == "rank 1 failed");
  // A long message arrives whole.
  const std::string big(5000, 'x');
  CHECK(lowest_rank_error(rank == 1 ? big : "") == big);
}

TEST_CASE("agree_or_report: false on every rank when one fails", "[mpi][agreement]") {
  vitddp::World w;
  w.rank = vitddp_test::world_rank();
  w.world_size = vitddp_test::world_size();
  CHECK(vitddp::agree_or_report(w, ""));
  CHECK(!vitddp::agree_or_report(w, w.rank == 1 ? "expected test failure on rank 1" : "", "--test: "));
}

TEST_CASE("error_of: an exception's message, or empty", "[mpi][agreement]") {
  CHECK(vitddp::error_of([] {}) == "");
  CHECK(vitddp::error_of([] { throw std::runtime_error("--out: nope"); }) == "--out: nope");
}
