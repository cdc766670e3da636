// output_directory_problem (src/output_path.h): where results, checkpoints, weights and traces
// go is checked before training.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "src/output_path.h"
#include "tests/catch.h"
#include "tests/test_util.h"

using namespace vitddp;

TEST_CASE("output_directory and output_directory_problem: missing, not a directory, not writable, fine", "[output_path]") {
  vitddp_test::TempDir dir("vitddp_outpath_");
  CHECK(output_directory_problem("--trace", dir.file("t.json")).empty());
  CHECK(output_directory("t.json") == std::filesystem::path("."));  // no parent: the working directory
  CHECK(output_directory(dir.file("t.json")) == dir.path);
  CHECK(output_directory_problem("--trace", dir.file("no/t.json")) ==
        "--trace: directory '" + dir.file("no") + "' does not exist");
  std::ofstream(dir.file("plain")) << "x";
  CHECK(output_directory_problem("--save-weights", dir.file("plain/w.h5")) ==
        "--save-weights: '" + dir.file("plain") + "' is not a directory");
  const std::string ro = dir.file("ro");
  REQUIRE(::mkdir(ro.c_str(), 0555) == 0);
  const std::string problem = output_directory_problem("--checkpoint-path", ro + "/c.h5");
  // The reference: whether this process can actually create a file there (root can: it passes
  // permission bits; anyone else cannot).
  const bool can_create = static_cast<bool>(std::ofstream(ro + "/probe"));
  if (can_create) CHECK(problem.empty());
  else CHECK(problem == "--checkpoint-path: directory '" + ro + "' is not writable (Permission denied)");
  ::chmod(ro.c_str(), 0755);
}
