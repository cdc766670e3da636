// The training loop of one rank: warm-up, timed window, cool-down; timings to rank 0's HDF5 file.
#pragma once
#include <functional>
#include <string>

#include "mpi/world/world.h"
#include "src/app/options.h"

namespace vitddp {

/// Runs a whole training job with validated options on every rank of `w` (the backend already
/// resolved to "gpu" or "cpu" in opts.backend, the output path already decided and checked by
/// rank 0). Rank 0 prints progress and a summary and writes opts.out. Returns the process exit
/// code. Throws std::runtime_error (device, communicator, file errors); main() aborts all ranks.
/// `notices` (optional) runs once every start-up check has passed, before the engine is set up:
/// lines about the run that must not come before a refusal's one line.
int run_training(const Options& opts, const World& w, const std::string& command_line,
                 const std::function<void()>& notices = {});

}  // namespace vitddp
