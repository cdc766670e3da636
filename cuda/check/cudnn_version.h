// The cuDNN library version in use at run time, as text for error messages and reports.
#pragma once
#include <cudnn.h>

#include <cstddef>
#include <string>

namespace vitddp {

/// cudnnGetVersion() of the loaded libcudnn (e.g. 91400) as "9.14.0"; may differ from the headers
/// the binary was built with (CUDNN_VERSION).
inline std::string cudnn_runtime_version() {
  const size_t v = cudnnGetVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace vitddp
