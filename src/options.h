// Command-line options of vitddp: one table (name, default, help, validation) drives parsing,
// --help and the configuration attributes written to the results file.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace vitddp {

/// Every setting of a run. Defaults reproduce the seed article's experiment: torchvision
/// vit_l_32, batch 32 per rank, 10 warm-up steps, 3 timed steps, 1 cool-down step, SGD lr 1e-3,
/// DDP buckets of 25 MiB with a 1 MiB first bucket (PyTorch's defaults).
struct Options {
  std::string model = "vit_l_32";
  int num_classes = 0;              ///< 0: the variant's own (1000; 10 for vit_tiny)
  int batch_size = 32;              ///< images per rank per micro-step (micro-batch)
  int grad_accum_steps = 1;         ///< micro-steps per optimizer step (one all-reduce per step)
  int warmup_steps = 10;
  int steps = 3;                    ///< timed steps
  int cooldown_steps = 1;
  std::string backend = "auto";     ///< gpu | cpu | auto (gpu when a CUDA device is visible)
  std::string data = "synthetic";   ///< synthetic | device | idx:DIR
  int data_workers = 4;             ///< host threads producing batches
  double bucket_cap_mb = 25.0;      ///< MiB (DDP bucket_cap_mb)
  double first_bucket_mb = 1.0;     ///< MiB (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)
  bool ddp = true;                  ///< false: --no-ddp, no reducer at all
  bool overlap = true;              ///< false: --no-overlap, all buckets after backward
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = 0.0;
  uint64_t seed = 0;
  std::string init = "torchvision"; ///< torchvision | random
  std::string out;                  ///< results file; empty: vitddp-<model>-<time>.h5
  bool overwrite = false;
  int progress_every = 1;           ///< print a line every N steps (rank 0)
  int flush_every = 10;             ///< flush the results file every N steps
  bool help = false;
  bool version = false;

  int total_steps() const { return warmup_steps + steps + cooldown_steps; }
};

/// Thrown for invalid command lines; what() is one line that names the option and the reason.
struct OptionError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parses argv (argv[0] skipped). Throws OptionError on unknown options, missing or malformed
/// values and values out of range (e.g. "--batch-size: must be a positive integer, got '0'").
/// Cross-option checks that need no files or devices are done here too.
Options parse_options(int argc, const char* const* argv);

/// The --help text: usage, every option with its default and meaning, examples.
std::string help_text();

/// (name, value) pairs of every option as given or defaulted, for the results file.
std::vector<std::pair<std::string, std::string>> option_values(const Options& o);

}  // namespace vitddp
