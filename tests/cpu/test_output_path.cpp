// output_directory_problem (src/output_path.h): where results, checkpoints, weights and traces
// go is checked before training.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "src/output_path.h"
#include "tests/catch.h"
#include "tests/test_util.h"

using namespace vitddp;

TEST_CASE("output_directory_problem: missing, not a directory, not writable, fine", "[output_path]") {
  vitddp_test::TempDir dir("vitddp_outpath_");
  CHECK(output_directory_problem("--trace", dir.file("t.json")).empty());
  CHECK(output_directory_problem("--trace", "t.json").empty());  // the working directory
  CHECK(output_directory_problem("--trace", dir.file("no/t.json")) ==
        "--trace: directory '" + dir.file("no") + "' does not exist");
  std::ofstream(dir.file("plain")) << "x";
  CHECK(output_directory_problem("--save-weights", dir.file("plain/w.h5")) ==
        "--save-weights: '" + dir.file("plain") + "' is not a directory");
  const std::string ro = dir.file("ro");
  REQUIRE(::mkdir(ro.c_str(), 0555) == 0);
  const std::string problem = output_directory_problem("--checkpoint-path", ro + "/c.h5");
  if (::geteuid() != 0) {
    CHECK(problem == "--checkpoint-path: directory '" + ro + "' is not writable (Permission denied)");
  } else {
    // root passes permission bits (access(2)): the directory is writable for it, as the kernel says.
    CHECK(problem.empty() == (::access(ro.c_str(), W_OK | X_OK) == 0));
  }
  ::chmod(ro.c_str(), 0755);
}
