// Start-up agreement between the ranks of one job before any of them acts on its command line:
// ranks launched with different command lines (MPMD, a wrapper script that adds an option on one
// node) or failing differently must all stop together with one clear line, never hang.
#pragma once
#include <string>
#include <vector>

#include "mpi/world.h"

namespace vitddp {

/// Collective over MPI_COMM_WORLD (MPI must be initialised). Compares every rank's command-line
/// arguments `args` (argv[1..]) with rank 0's, as options: name -> values, so the order of
/// different options does not matter. Returns "" on every rank when they agree; otherwise a
/// non-empty string on every rank, on rank 0 the one line naming the options that differ and the
/// ranks where they do, e.g. "ranks were started with different options: --dry-run differs
/// on rank 1 (every rank must get the same command line)".
std::string command_line_mismatch(const std::vector<std::string>& args, const World& w);

/// Collective over MPI_COMM_WORLD. "" on every rank when `error` is empty on every rank; otherwise,
/// on every rank, the error of the lowest rank that has one, followed by " (on rank R)" when that
/// rank is not 0.
std::string first_rank_error(const std::string& error, const World& w);

/// The options named in `args` (tokens "--name" or "--name=value"; "" for tokens before the
/// first option) whose values differ between `a` and `b`, or that only one of them has; sorted.
std::vector<std::string> differing_options(const std::vector<std::string>& a, const std::vector<std::string>& b);

}  // namespace vitddp
