// The TF32 tensor-core primitives the attention kernels share (device code): round an fp32 value
// to tf32 and one warp-wide mma.sync m16n8k8 with tf32 operands and fp32 accumulation (PTX ISA,
// "Matrix Fragments for mma.m16n8k8"; A a0 = (g, t), a1 = (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4);
// B b0 = (k t, n g), b1 = (k t+4, n g); C c0, c1 = (g, 2t), (g, 2t+1), c2, c3 = (g+8, 2t), (g+8,
// 2t+1); lane = 4 g + t).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace vitddp {

/// x rounded to tf32 (10-bit mantissa, round to nearest, ties away: cvt.rna, as a TF32 GEMM's
/// operands), as the bits of an fp32 value.
__device__ __forceinline__ uint32_t tf32_rna(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

/// c += a b for one 16 x 8 x 8 tile: a and b tf32 bit patterns in the fragment layout above.
__device__ __forceinline__ void mma_tf32_m16n8k8(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace vitddp
