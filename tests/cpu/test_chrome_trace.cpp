// ChromeTrace::write (src/io/chrome_trace.h): the JSON through PATH.tmp and rename, and its failure
// path: one line naming the .tmp and the system's reason, no .tmp left.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "src/io/chrome_trace.h"
#include "tests/catch.h"
#include "tests/test_util.h"

using namespace vitddp;
namespace fs = std::filesystem;

TEST_CASE("ChromeTrace::write: complete JSON under the final name, no .tmp", "[trace]") {
  vitddp_test::TempDir dir("vitddp_trace_");
  ChromeTrace t;
  t.add(0, ChromeTrace::Steps, "Batch 0", 1.0, 2.5);
  t.add(1, ChromeTrace::Comm, "all-reduce \"b\"", 0.5, 0.25);
  const std::string path = dir.file("t.json");
  t.write(path, 2);
  std::stringstream got;
  got << std::ifstream(path).rdbuf();
  CHECK(got.str() == t.json(2));
  CHECK(got.str().find("{\"name\":\"Batch 0\",\"ph\":\"X\",\"pid\":0,\"tid\":0,\"ts\":1000.000,\"dur\":2500.000}") !=
        std::string::npos);
  CHECK(got.str().find("\"all-reduce \\\"b\\\"\"") != std::string::npos);
  CHECK_FALSE(fs::exists(path + ".tmp"));
}

TEST_CASE("ChromeTrace::write on a full device: one line with the reason, no .tmp, no file", "[trace]") {
  vitddp_test::TempDir dir("vitddp_trace_");
  const std::string path = dir.file("t.json");
  // The .tmp is a link to /dev/full, where every write fails with ENOSPC, as on a full disk.
  fs::create_symlink("/dev/full", path + ".tmp");
  ChromeTrace t;
  t.add(0, ChromeTrace::Steps, "Batch 0", 0, 1);
  std::string msg;
  try {
    t.write(path, 1);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  CHECK(msg == "--trace: cannot write '" + path + ".tmp': No space left on device");
  CHECK_FALSE(fs::exists(fs::symlink_status(path + ".tmp")));
  CHECK_FALSE(fs::exists(path));
}
