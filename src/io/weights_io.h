// Weights files: the parameters of a ViT under their torchvision names in HDF5, the format shared
// with tests/reference/torch_twin.py (PyTorch side), plus the reader of that program's reference
// ("twin") files for the parity tests.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/param_layout.h"
#include "model/sgd.h"

namespace vitddp {

/// Weights file layout (format "vitddp-weights", version 1):
///   /params/<torchvision name>   float32 (H5T_IEEE_F32LE), the tensor's torchvision state_dict
///                                shape, row-major (C order), e.g.
///                                /params/encoder.layers.encoder_layer_0.mlp.0.weight [3072, 768]
///   root attributes              format = "vitddp-weights" (string), format_version = 1,
///                                model = layout.cfg.name (string), num_classes, parameter_count
/// One dataset per entry of layout.params, nothing else in /params. `torch_twin.py --load FILE`
/// loads it into torchvision's model with load_state_dict(strict=True). A twin file (below) holds
/// the same /params group, so load_weights also reads a twin file's initial parameters.
///
/// Writes the parameters of host flat buffer `host_params` (layout.total floats, ParamLayout
/// offsets) to `path`. Crash-safe: everything is written to `path + ".tmp"`, closed and fsync'd,
/// then moved to `path` in one step (rename(2) with `overwrite`, link(2) + unlink(2) without it, so
/// an existing file is never replaced), and the directory is fsync'd; a crash leaves either no
/// file or a complete one (and possibly a stale .tmp, overwritten by the next save).
/// Throws std::runtime_error naming the path when the parent directory is missing, not a directory or
/// not writable (output_directory_problem), when `path`
/// exists and `overwrite` is false, or when HDF5 / the file system fails (the .tmp is removed).
void save_weights(const std::string& path, const ParamLayout& layout, const float* host_params, bool overwrite);

/// Reads /params/<name> of every parameter of `layout` from `path` into host flat buffer
/// `host_params` (layout.total floats; padding elements are set to 0), like torch's
/// load_state_dict(strict=True): every parameter must be present with exactly its torchvision
/// shape and stored as 32-bit floats, and /params must hold nothing else.
/// Throws std::runtime_error whose message names the file and, where one is at fault, the
/// parameter: file missing or not an HDF5 file, no /params group, a missing parameter, a shape
/// mismatch (both shapes printed), a wrong element type, unexpected datasets in /params, a tensor
/// holding NaN or Inf ("HDF5 file 'w.h5': dataset /params/<name> holds NaN (element i of n)").
void load_weights(const std::string& path, const ParamLayout& layout, float* host_params);

/// The forward half of a file written by tests/reference/torch_twin.py (torchvision's model run by
/// PyTorch in strict fp32, see that program's docstring): one batch and PyTorch's logits and loss
/// on it. `torch_twin.py --load WEIGHTS --input TWIN --out FILE` writes exactly this (the forward of
/// a weights file on a twin file's batch); a twin file holds it for its initial parameters.
struct TwinForward {
  std::string model;             ///< root attribute "model", e.g. "vit_b_32" (== layout.cfg.name)
  std::string torch_version;     ///< root attribute "torch_version", e.g. "2.11.0+cu130"
  int batch = 0;                 ///< images in the batch (the length of /input/labels)
  std::vector<float> images;     ///< /input/images [batch, C, H, W] fp32 NCHW
  std::vector<int32_t> labels;   ///< /input/labels [batch] (int32 or any integer type) in [0, num_classes)
  std::vector<float> logits;     ///< /logits [batch, num_classes] fp32
  float loss = 0;                ///< /loss (fp32 scalar): mean cross-entropy of logits vs labels
};

/// A whole twin file (`torch_twin.py --model ...`): the forward half at the initial parameters,
/// plus the parameters, gradients and parameters after 3 SGD steps, as flat buffers with
/// `layout`'s offsets (layout.total floats, padding 0).
struct TwinReference : TwinForward {
  int64_t seed = 0;                         ///< root attribute "seed" (torch.manual_seed)
  SgdConfig sgd;                            ///< root attributes "lr", "momentum", "weight_decay" (torch.optim.SGD)
  std::vector<float> params;                ///< /params: the initial parameters
  std::vector<float> grads;                 ///< /grads: dLoss/dparams at the initial parameters
  std::vector<float> params_after_3_steps;  ///< /params_after_3_steps: after 3 SGD steps on the same batch
};

/// Reads the forward half (attributes model and torch_version, /input/images, /input/labels,
/// /logits, /loss) of a file written by torch_twin.py for `layout`. Throws std::runtime_error
/// naming the file and the dataset / attribute at fault (missing, mis-shaped, wrong element type; a
/// "model" attribute other than layout.cfg.name; a label out of range).
TwinForward load_twin_forward(const std::string& path, const ParamLayout& layout);

/// Reads a whole twin file for `layout`: load_twin_forward's part, the attributes seed, lr,
/// momentum, weight_decay, and the groups /params, /grads, /params_after_3_steps (each checked as
/// load_weights checks /params). Errors as load_twin_forward and load_weights.
TwinReference load_twin_reference(const std::string& path, const ParamLayout& layout);

/// Reads float32 dataset `dataset` (e.g. "/logits") of HDF5 file `path`, checking that its shape
/// is exactly `shape` ({} for a scalar). Returns its elements row-major. Throws std::runtime_error
/// naming the file and dataset when the file is missing or not HDF5, the dataset is missing, the
/// shape differs or the elements are not 32-bit floats.
std::vector<float> load_float_array(const std::string& path, const std::string& dataset,
                                    const std::vector<int64_t>& shape);

/// Root string attribute `name` of HDF5 file `path` (variable- or fixed-length). Throws
/// std::runtime_error naming the file and attribute when missing or not a string.
std::string load_string_attr(const std::string& path, const std::string& name);

}  // namespace vitddp
