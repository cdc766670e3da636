// MPI world helpers outside mpirun (cpu_tests runs without MPI) and the device choice rules.
#include "mpi/world/world.h"
#include "tests/catch.h"

using namespace vitddp;

TEST_CASE("agreement helpers act on the single process when MPI is not initialised", "[world]") {
  REQUIRE_FALSE(mpi_active());  // cpu_tests is started without a launcher
  CHECK(all_ranks_ok(true));
  CHECK_FALSE(all_ranks_ok(false));
  CHECK(all_ranks_equal(42));
}

TEST_CASE("device choice: one per rank, a single visible GPU per task, clear errors", "[world]") {
  World w;
  w.hostname = "node1";
  w.local_size = 2;
  w.local_rank = 1;
  CHECK(select_device(w, 2) == 1);
  CHECK(select_device(w, 8) == 1);
  CHECK(select_device(w, 1) == 0);  // per-task CUDA_VISIBLE_DEVICES: each rank sees its own GPU as 0
  w.local_size = 3;
  w.local_rank = 2;
  CHECK_THROWS_WITH(select_device(w, 2), Catch::Contains("3 ranks share host node1 but it has only 2 visible GPU(s)"));
  CHECK_THROWS_WITH(select_device(w, 0), Catch::Contains("no CUDA device is visible on host node1"));
}
