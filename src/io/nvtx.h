// NVTX ranges with the seed article's names and colours (header-only NVTX3: no library to link;
// the ranges cost nothing unless a tool such as nsys injects itself). NVTX3 ships with the CUDA
// toolkit: builds with the GPU backend define VITDDP_NVTX=1 (CMakeLists.txt); the CPU-only build
// (VITDDP_GPU=OFF) compiles NvtxRange to nothing.
#pragma once
#if VITDDP_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

#include <cstdint>
#include <string>

namespace vitddp {

/// ARGB colours of the article's annotations.
enum class NvtxColor : uint32_t {
  Blue = 0xFF1F77B4,    ///< "Batch i"
  Red = 0xFFD62728,     ///< "get batch"
  Green = 0xFF2CA02C,   ///< "forward"
  Purple = 0xFF9467BD,  ///< "backward"
  Yellow = 0xFFFFD700,  ///< "optimizer step"
  Orange = 0xFFFF7F0E,  ///< "all-reduce bucket k"
};

/// Scoped push/pop range on the calling thread (nothing without VITDDP_NVTX).
class NvtxRange {
 public:
#if VITDDP_NVTX
  NvtxRange(const std::string& name, NvtxColor color) {
    nvtxEventAttributes_t a = {};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = static_cast<uint32_t>(color);
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = name.c_str();
    nvtxRangePushEx(&a);
  }
  ~NvtxRange() { nvtxRangePop(); }
#else
  NvtxRange(const std::string&, NvtxColor) {}
#endif
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace vitddp
