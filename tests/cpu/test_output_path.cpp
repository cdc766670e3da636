// output_directory_problem (src/io/output_path.h): where results, checkpoints, weights and traces
// go is checked before training.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "src/io/output_path.h"

#include <vector>
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

// One case per rule of output_paths_problem's table, each with the exact message.
TEST_CASE("output_paths_problem: each rule of the table, in order", "[output_path]") {
  vitddp_test::TempDir dir("vitddp_outrules_");
  const std::string a = dir.file("a.h5"), b = dir.file("b.json");
  auto problem = [](std::vector<OutputFile> outs, std::vector<InputFile> ins = {}, bool overwrite = false) {
    return output_paths_problem(outs, ins, overwrite);
  };
  CHECK(problem({{"--out", a}, {"--trace", b}, {"--save-weights", ""}}).empty());  // fresh paths; empty ignored
  // 1. directory
  CHECK(problem({{"--out", a}, {"--trace", dir.file("no/t.json")}}) ==
        "--trace: directory '" + dir.file("no") + "' does not exist");
  // 2. dangling link (refused even with --overwrite)
  std::filesystem::create_symlink(dir.file("missing"), dir.file("dangling"));
  CHECK(problem({{"--trace", dir.file("dangling")}}, {}, true) ==
        "--trace: '" + dir.file("dangling") + "' is a symbolic link to a missing file");
  // 3. not a regular file
  std::filesystem::create_directory(dir.file("d"));
  CHECK(problem({{"--out", dir.file("d")}}, {}, true) ==
        "--out: '" + dir.file("d") + "' is a directory; give the path of a file to write");
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  CHECK(problem({{"--trace", dir.file("fifo")}}, {}, true) == "--trace: '" + dir.file("fifo") + "' is not a regular file (a FIFO)");
  CHECK(problem({{"--trace", "/dev/null"}}, {}, true) == "--trace: '/dev/null' is not a regular file (a character device)");
  // 4. an input, even with --overwrite and through a symbolic link; a checkpoint may be the --resume file
  std::ofstream(dir.file("w.h5")) << "x";
  std::filesystem::create_symlink(dir.file("w.h5"), dir.file("link.json"));
  const std::vector<InputFile> ins = {{"--init-from", dir.file("w.h5")}, {"--resume", ""}};
  CHECK(problem({{"--trace", dir.file("link.json")}}, ins, true) ==
        "--trace: '" + dir.file("link.json") +
            "' is the --init-from file, an input of this run: it is never overwritten, not even with --overwrite");
  CHECK(problem({{"--checkpoint-path", dir.file("w.h5"), true}}, {{"--resume", dir.file("w.h5")}}).empty());
  CHECK(problem({{"--trace", dir.file("w.h5")}}, {{"--resume", dir.file("w.h5")}}, true) ==
        "--trace: '" + dir.file("w.h5") +
            "' is the --resume file, an input of this run: it is never overwritten, not even with --overwrite");
  // 5. two outputs: the later one named first; "./" and ".." spellings are the same file
  CHECK(problem({{"--out", a}, {"--trace", dir.file("d/../a.h5")}}) ==
        "--trace: '" + dir.file("d/../a.h5") + "' is also the --out file; give each output its own path");
  // 6. exists, unless --overwrite
  std::ofstream(b) << "{}";
  CHECK(problem({{"--out", a}, {"--trace", b}}) == "--trace: '" + b + "' exists (use --overwrite to replace it)");
  CHECK(problem({{"--out", a}, {"--trace", b}}, {}, true).empty());
  // The rules run in table order: a directory problem of a later output before a clash of an earlier one.
  CHECK(problem({{"--out", a}, {"--trace", a}, {"--save-weights", dir.file("no/w.h5")}}) ==
        "--save-weights: directory '" + dir.file("no") + "' does not exist");
  // 4 through a hard link: another name of an input is that input.
  REQUIRE(::link(dir.file("w.h5").c_str(), dir.file("hard.h5").c_str()) == 0);
  CHECK(problem({{"--out", dir.file("hard.h5")}}, ins, true) ==
        "--out: '" + dir.file("hard.h5") +
            "' is the --init-from file, an input of this run: it is never overwritten, not even with --overwrite");
}

// The scratch files of outputs written through path + ".tmp" (weights, trace, checkpoints).
TEST_CASE("output_paths_problem: scratch files clash with nothing, are never links, and may be leftovers",
          "[output_path]") {
  vitddp_test::TempDir dir("vitddp_scratch_");
  const std::string t = dir.file("t.json"), w = dir.file("w.h5");
  const std::vector<OutputFile> outs = with_scratch_files({{"--out", dir.file("r.h5")}, {"--trace", t}, {"--save-weights", w}});
  REQUIRE(outs.size() == 5);
  CHECK(outs[3].option == "--trace (scratch file)");
  CHECK(outs[3].path == t + ".tmp");
  CHECK(outs[3].scratch);
  CHECK(outs[4].path == w + ".tmp");
  CHECK(output_paths_problem(outs, {}, false).empty());
  // Another output at a scratch name: refused, with or without --overwrite.
  const std::vector<OutputFile> clash = with_scratch_files({{"--out", t + ".tmp"}, {"--trace", t}});
  CHECK(output_paths_problem(clash, {}, true) ==
        "--trace (scratch file): '" + t + ".tmp' is also the --out file; give each output its own path");
  // A leftover scratch file is replaced (no --overwrite needed). The weights and checkpoint
  // writers remove their scratch file before writing, so a link there is harmless; the trace's
  // is opened in place, so a symbolic link or a file with another name there is refused.
  std::ofstream(w + ".tmp") << "partial";
  CHECK(output_paths_problem(outs, {}, false).empty());
  std::ofstream(dir.file("keep")) << "x";
  std::filesystem::remove(w + ".tmp");
  std::filesystem::create_symlink(dir.file("keep"), w + ".tmp");
  CHECK(output_paths_problem(outs, {}, false).empty());
  REQUIRE(::link(dir.file("keep").c_str(), (t + ".tmp").c_str()) == 0);
  CHECK(output_paths_problem(outs, {}, true) ==
        "--trace (scratch file): '" + t + ".tmp' has other hard links (another file's name): remove it (vitddp "
        "writes its scratch file there)");
  std::filesystem::remove(t + ".tmp");
  std::filesystem::remove(w + ".tmp");  // two links to one file would be two outputs at one path
  std::filesystem::create_symlink(dir.file("keep"), t + ".tmp");
  CHECK(output_paths_problem(outs, {}, true) ==
        "--trace (scratch file): '" + t + ".tmp' is a symbolic link: remove it (vitddp writes its scratch file there)");
}

TEST_CASE("input_file_problem: a FIFO or a directory is refused before it is opened", "[output_path]") {
  vitddp_test::TempDir dir("vitddp_input_");
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  CHECK(input_file_problem("--init-from", dir.file("fifo")) ==
        "--init-from: '" + dir.file("fifo") + "' is not a regular file (a FIFO)");
  CHECK(input_file_problem("--resume", dir.path.string()) == "--resume: '" + dir.path.string() + "' is a directory");
  std::ofstream(dir.file("w.h5")) << "x";
  CHECK(input_file_problem("--init-from", dir.file("w.h5")).empty());
  CHECK(input_file_problem("--init-from", dir.file("missing.h5")).empty());  // the reader names a missing file
  CHECK(input_file_problem("--init-from", "").empty());
}

TEST_CASE("resolved_path: realpath of the directory plus the name, symbolic links followed", "[output_path]") {
  vitddp_test::TempDir dir("vitddp_resolve_");
  std::filesystem::create_directory(dir.file("sub"));
  std::filesystem::create_directory_symlink(dir.file("sub"), dir.file("alias"));
  const std::filesystem::path real = std::filesystem::canonical(dir.path) / "sub" / "f.h5";
  CHECK(resolved_path(dir.file("alias/f.h5")) == real);  // not existing yet: the directory resolved
  std::ofstream(real) << "x";
  std::filesystem::create_symlink(real, dir.file("l.h5"));
  CHECK(resolved_path(dir.file("l.h5")) == real);
}
