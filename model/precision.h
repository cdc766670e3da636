// Run-time numeric precision of the GPU model: strict fp32, TF32 GEMMs, or bf16 mixed precision.
#pragma once
#include <string>
#include <vector>

#include "model/dtype.h"

namespace vitddp {

/// How GpuViT computes (the master weights, the optimizer and the gradient buffer are fp32 in
/// every mode, so the all-reduce moves the same fp32 bytes as PyTorch DDP):
///  - fp32: strict fp32 everywhere (cuBLASLt CUBLAS_COMPUTE_32F_PEDANTIC, fp32 operands).
///  - tf32: as fp32, but the GEMMs use CUBLAS_COMPUTE_32F_FAST_TF32 (operands rounded to TF32,
///          fp32 accumulation), like torch.backends.cuda.matmul.allow_tf32 = True, and the
///          attention core for T <= 64, head_dim 64 runs on TF32 tensor cores (cuda/kernels/attention_mma.h),
///          beyond 64 tokens as cuBLAS batched GEMMs of the same compute type (cuda/kernels/attention_gemm.h).
///  - bf16: mixed precision as torch.autocast(dtype=bfloat16): GEMM and attention operands in
///          bf16 with fp32 accumulation; LayerNorm, softmax and loss statistics, the residual
///          stream and every parameter gradient in fp32.
enum class Precision { fp32, tf32, bf16 };

/// The storage type of the GEMM and attention operands: BF16 for bf16, F32 for fp32 and tf32
/// (TF32 is fp32 storage read by the tensor cores with a 10-bit mantissa).
inline DType operand_dtype(Precision p) { return p == Precision::bf16 ? DType::BF16 : DType::F32; }

/// "fp32", "tf32" or "bf16".
const char* precision_name(Precision p);

/// The accepted names, in the order of the enum ({"fp32", "tf32", "bf16"}).
std::vector<std::string> precision_names();

/// Parses "fp32" | "tf32" | "bf16" (exact, lower case). Throws std::invalid_argument naming the
/// value and the choices otherwise.
Precision parse_precision(const std::string& name);

}  // namespace vitddp
