// Link-time stand-ins for the NVRTC functions that the cudnn-frontend headers reference but vitddp
// never calls.
//
// cudnn_frontend.h (1.32) compiles in an experimental SM100 RMSNorm+SiLU engine that builds its
// kernels with NVRTC (experimental/nvrtc_shim.h, statically bound unless the whole frontend is
// dynamically loaded). vitddp only builds SDPA graphs (cuda/kernels/cudnn_attention.cpp), so that engine is
// never used; linking the real libnvrtc would make every binary need libnvrtc.so.13 at start-up,
// even on GPU machines that have none and even with --attention custom. These definitions satisfy
// the linker instead: each reports NVRTC_ERROR_INTERNAL_ERROR without doing anything. They have
// hidden visibility, so they are never exported and cannot interpose on a real libnvrtc that
// cuDNN itself loads with dlopen for its runtime-compiled engines.
#include <nvrtc.h>

#include <cstddef>

#define VITDDP_NVRTC_UNUSED extern "C" __attribute__((visibility("hidden"))) nvrtcResult

VITDDP_NVRTC_UNUSED nvrtcCreateProgram(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                       const char* const*) {
  return NVRTC_ERROR_INTERNAL_ERROR;
}
VITDDP_NVRTC_UNUSED nvrtcDestroyProgram(nvrtcProgram*) { return NVRTC_ERROR_INTERNAL_ERROR; }
VITDDP_NVRTC_UNUSED nvrtcCompileProgram(nvrtcProgram, int, const char* const*) { return NVRTC_ERROR_INTERNAL_ERROR; }
VITDDP_NVRTC_UNUSED nvrtcGetProgramLogSize(nvrtcProgram, size_t*) { return NVRTC_ERROR_INTERNAL_ERROR; }
VITDDP_NVRTC_UNUSED nvrtcGetProgramLog(nvrtcProgram, char*) { return NVRTC_ERROR_INTERNAL_ERROR; }
VITDDP_NVRTC_UNUSED nvrtcGetCUBINSize(nvrtcProgram, size_t*) { return NVRTC_ERROR_INTERNAL_ERROR; }
VITDDP_NVRTC_UNUSED nvrtcGetCUBIN(nvrtcProgram, char*) { return NVRTC_ERROR_INTERNAL_ERROR; }
