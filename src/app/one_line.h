// Error lines that stay one line on a terminal and in a Slurm log.
#pragma once
#include <string>

namespace vitddp {

/// `message` with its control characters escaped (\n, \t, \xNN): an error about a path that holds
/// a newline still prints as one line.
std::string one_line(const std::string& message);

}  // namespace vitddp
