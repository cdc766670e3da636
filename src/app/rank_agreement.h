// Start-up agreement between the ranks of one job: ranks launched with different command lines
// (MPMD, a wrapper script that adds an option on one node) or failing a start-up check differently
// must all stop together with one clear line, before any device work, never hang.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "mpi/world/world.h"
#include "src/app/one_line.h"

namespace vitddp {

/// Collective over MPI_COMM_WORLD (every rank calls it with its own outcome; "" = ok): "" on every
/// rank when every rank passed "", else, on every rank, the message of the lowest-numbered rank
/// that passed a non-empty one (MPI_Allreduce MIN of the failing ranks, then MPI_Bcast of that
/// rank's message). Without MPI (mpi_active() false: unit tests) returns `local_error`.
std::string lowest_rank_error(const std::string& local_error);

/// Runs `check` on this rank and returns "" or its error: the what() of a std::exception it threw.
std::string error_of(const std::function<void()>& check);

/// One start-up check agreed on by all ranks: true on every rank when `local_error` is "" on
/// every rank. Else rank 0 prints "vitddp: error: <prefix><message>" (stderr, once, one_line) with the
/// lowest failing rank's message (lowest_rank_error), and every rank gets false: the caller then
/// returns exit code 2 on every rank, before any device work. Collective.
bool agree_or_report(const World& w, const std::string& local_error, const std::string& prefix = "");

/// Collective over MPI_COMM_WORLD (MPI must be initialised). Compares every rank's command-line
/// arguments `args` (argv[1..]) with rank 0's, as options: name -> values, so the order of
/// different options does not matter. Returns "" on every rank when they agree; otherwise a
/// non-empty string on every rank, on rank 0 the one line naming the options that differ and the
/// ranks where they do, e.g. "ranks were started with different options: --dry-run differs
/// on rank 1 (every rank must get the same command line)".
std::string command_line_mismatch(const std::vector<std::string>& args, const World& w);

/// The options named in `args` (tokens "--name" or "--name=value"; "" for tokens before the
/// first option) whose values differ between `a` and `b`, or that only one of them has; sorted.
std::vector<std::string> differing_options(const std::vector<std::string>& a, const std::vector<std::string>& b);

}  // namespace vitddp
