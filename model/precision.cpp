#include "model/precision.h"

#include <stdexcept>

namespace vitddp {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
  }
  return "unknown";
}

std::vector<std::string> precision_names() { return {"fp32", "tf32", "bf16"}; }

Precision parse_precision(const std::string& name) {
  for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16})
    if (name == precision_name(p)) return p;
  throw std::invalid_argument("unknown precision '" + name + "' (choose one of: fp32, tf32, bf16)");
}

}  // namespace vitddp
