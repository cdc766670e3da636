// One main for every test binary. MPI is initialised when the binary was started by an MPI
// launcher (mpirun sets OMPI_COMM_WORLD_SIZE / PMI_SIZE); plain runs stay MPI-free.
#define CATCH_CONFIG_RUNNER
#include "tests/catch.h"

#include <mpi.h>
#include <cstdlib>

namespace {
bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
}
}  // namespace

int main(int argc, char** argv) {
  const bool use_mpi = launched_by_mpi();
  if (use_mpi) MPI_Init(&argc, &argv);
#ifdef VITDDP_CATCH_V3
  int result = Catch::Session().run(argc, argv);
#else
  int result = Catch::Session().run(argc, argv);
#endif
  if (use_mpi) {
    // Every rank must agree on failure so mpirun reports it.
    int worst = 0;
    MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    result = worst;
  }
  return result;
}
