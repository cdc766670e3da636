// The element types gradients travel in: the one dtype vocabulary of the reducer (compression
// payloads, transports, the copy-engine sum, the cast kernels). CUDA-free; each transport maps it
// to its own library's type (ncclDataType_t, MPI_Datatype) in its own file.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

namespace vitddp {

/// fp32 (IEEE binary32), fp16 (IEEE binary16) and bf16 (bfloat16: binary32's top 16 bits).
/// 16-bit values are stored as their raw bits (uint16_t) outside device kernels.
enum class DType { F32, F16, BF16 };

/// Bytes per element: 4 for F32, 2 for F16 and BF16.
inline size_t dtype_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

/// "fp32", "fp16" or "bf16" (the names --compression and --precision use).
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
  }
  return "?";
}

/// Throws std::invalid_argument naming `what` unless `t` is F16 or BF16 (a 16-bit payload).
inline void require_16bit(DType t, const char* what) {
  if (t != DType::F16 && t != DType::BF16)
    throw std::invalid_argument(std::string(what) + ": the payload type must be fp16 or bf16, got " + dtype_name(t));
}

}  // namespace vitddp
