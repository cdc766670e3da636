// Checks on where output files will go, made at start-up on every rank before any work, so that a
// long run neither fails at its end nor destroys a file: the results file (--out), checkpoints
// (--checkpoint-path, every file of its {step} pattern), --save-weights and --trace, against each
// other and against every input of the run.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace vitddp {

/// The directory a file at `path` goes into: its parent, "." when it has none.
std::filesystem::path output_directory(const std::string& path);

/// Why this process cannot create files in the directory of `path` ("" when it can): the
/// directory (path's parent, "." when none) does not exist, is not a directory, or is not
/// writable (access(2) with W_OK | X_OK: a read-only file system too; root passes permission
/// bits). The message starts with `what` (an option name such as "--trace") and names the directory:
/// "<what>: directory 'D' does not exist" / "... is not a directory" / "... is not writable (reason)".
std::string output_directory_problem(const std::string& what, const std::string& path);

/// The file a path names, for comparing paths: realpath(3) of its directory joined with its file
/// name, and, when that is a symbolic link to an existing file, the link's target resolved the same
/// way (std::filesystem::canonical). A path whose directory does not exist is made absolute and
/// lexically normal instead. Never throws.
std::filesystem::path resolved_path(const std::string& path);

/// One file a run writes.
struct OutputFile {
  std::string option;  ///< the option that names it, e.g. "--trace": starts every message
  std::string path;    ///< as given
  /// A checkpoint: it may be the --resume file, which the run continues (then neither "is an
  /// input" nor "exists" applies).
  bool may_replace_resume = false;
  /// The scratch file (path + ".tmp") another output is written to before it is renamed or
  /// linked into place: a leftover of an interrupted write is replaced, so "exists" does not apply.
  bool scratch = false;
  /// A scratch file its writer opens where it is (--trace: open(2) with O_TRUNC) instead of
  /// removing it first (weights, checkpoints): it must be neither a symbolic link nor a file with
  /// other hard links, whose other name the write would reach (rule 7).
  bool opened_in_place = false;
};

/// The output `out` and, where the run writes it through a scratch file (--save-weights, --trace,
/// checkpoints), that scratch file: path + ".tmp", option "<option> (scratch file)".
std::vector<OutputFile> with_scratch_files(std::vector<OutputFile> outputs);

/// Why `path`, given to input option `option`, cannot be read as a file ("" when it can, or when
/// it does not exist: the reader names that): "<option>: '<p>' is a directory" / "... is not a
/// regular file (a FIFO | ...)": opening a FIFO would block the run before its start-up ends.
std::string input_file_problem(const std::string& option, const std::string& path);

/// One file a run reads.
struct InputFile {
  std::string option;  ///< e.g. "--init-from", "--resume", "--data"
  std::string path;
};

/// The first problem with `outputs` (checked in their order; "" when there is none), from this
/// table of rules, each applied to every output before the next rule:
///   1. directory:     output_directory_problem: missing, not a directory, not writable;
///   2. dangling link: "<opt>: '<p>' is a symbolic link to a missing file";
///   3. not a file:    "<opt>: '<p>' is a directory; give the path of a file to write" /
///                     "<opt>: '<p>' is not a regular file (a FIFO | a character device | a block
///                     device | a socket)";
///   4. an input:      "<opt>: '<p>' is the <input opt> file, an input of this run: it is never
///                     overwritten, not even with --overwrite" (resolved paths equal, or both
///                     existing and the same file by device and inode: a hard link; a checkpoint
///                     may be the --resume file);
///   5. two outputs:   "<opt>: '<p>' is also the <other opt> file; give each output its own path"
///                     (the later output in `outputs` is named first);
///   6. exists:        "<opt>: '<p>' exists (use --overwrite to replace it)" unless `overwrite`
///                     (or a checkpoint that is the --resume file, or a scratch file);
///   7. scratch:       "<opt> (scratch file): '<p>' is a symbolic link" / "... has other hard links
///                     (another file's name): remove it" for an existing scratch file opened in place.
/// Paths are compared as resolved_path gives them (symbolic links followed). Inputs with an
/// empty path are ignored, so are outputs with an empty path. Local file-system checks only.
std::string output_paths_problem(const std::vector<OutputFile>& outputs, const std::vector<InputFile>& inputs,
                                 bool overwrite);

/// "" when `path` (absent) can be created: it is created with O_EXCL and removed at once, which finds
/// what access(2) on its directory does not (a name over the file system's limit, /proc or /sys);
/// else "'<path>' cannot be created (<strerror>)". For the one process that writes the file.
std::string creation_trial_problem(const std::string& path);

/// Whether the outputs other than --out can be created ("" when they can), for one process only
/// (the one that writes them: concurrent probes of the same path would see each other's file),
/// after output_paths_problem passed: for each option, its output with the longest file name, when
/// absent, is created with O_EXCL and removed at once, which finds what access(2) on its directory
/// does not (a name over the file system's limit, /proc or /sys): "<opt>: '<p>' cannot be created
/// (<strerror>)"; an existing scratch file opened in place must be writable: "<opt> (scratch
/// file): '<p>' cannot be written (<strerror>): remove it".
std::string output_creation_problem(const std::vector<OutputFile>& outputs);

}  // namespace vitddp
