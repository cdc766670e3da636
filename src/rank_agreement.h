// Start-up checks that every rank agrees on: one failing rank ends every rank with one message.
#pragma once
#include <functional>
#include <string>

#include "mpi/world/world.h"

namespace vitddp {

/// Collective over MPI_COMM_WORLD (every rank calls it with its own outcome; "" = ok): "" on every
/// rank when every rank passed "", else, on every rank, the message of the lowest-numbered rank
/// that passed a non-empty one (MPI_Allreduce MIN of the failing ranks, then MPI_Bcast of that
/// rank's message). Without MPI (mpi_active() false: unit tests) returns `local_error`.
std::string lowest_rank_error(const std::string& local_error);

/// Runs `check` on this rank and returns "" or its error: the what() of a std::exception it threw.
std::string error_of(const std::function<void()>& check);

/// One start-up check agreed on by all ranks: true on every rank when `local_error` is "" on
/// every rank. Else rank 0 prints "vitddp: error: <prefix><message>" (stderr, once) with the
/// lowest failing rank's message (lowest_rank_error), and every rank gets false: the caller then
/// returns exit code 2 on every rank, before any device work. Collective.
bool agree_or_report(const World& w, const std::string& local_error, const std::string& prefix = "");

}  // namespace vitddp
