// Checks on where an output file will go, made before training so that a long run does not fail
// at its end (results file, checkpoints, --save-weights, --trace).
#pragma once
#include <filesystem>
#include <string>

namespace vitddp {

/// The directory a file at `path` goes into: its parent, "." when it has none.
std::filesystem::path output_directory(const std::string& path);

/// Why this process cannot create files in the directory of `path` ("" when it can): the
/// directory (path's parent, "." when none) does not exist, is not a directory, or is not
/// writable (access(2) with W_OK | X_OK: a read-only file system too; root passes permission
/// bits). The message starts with `what` (an option name such as "--trace") and names the directory:
/// "<what>: directory 'D' does not exist" / "... is not a directory" / "... is not writable (reason)".
std::string output_directory_problem(const std::string& what, const std::string& path);

}  // namespace vitddp
