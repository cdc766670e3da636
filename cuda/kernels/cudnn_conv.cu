// conv_proj through cuDNN's convolution API (cudnn_cnn.h); see cuda/kernels/cudnn_conv.h.
#include "cuda/kernels/cudnn_conv.h"

#include <cudnn.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/kernels/cast.h"
#include "cuda/check/check_cuda.h"
#include "cuda/check/check_cudnn.h"
#include "cuda/check/cudnn_version.h"
#include "cuda/model/device_buffer.h"

namespace vitddp {
namespace {
using bf16 = __nv_bfloat16;

constexpr size_t kMaxWorkspace = size_t(256) << 20;  // algorithms needing more are skipped

int grid_for(size_t n, int threads) {
  return (int)std::max<size_t>(1, std::min<size_t>((n + threads - 1) / threads, 132 * 32));
}

/// emb[r, d] = float(y[r, d]) + bias[d] for r < rows (y may equal emb when TY = float).
template <typename TY>
__global__ void add_bias_kernel(const TY* y, const float* __restrict__ bias, float* emb,
                                size_t rows, int D) {
  const size_t n = rows * D;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    emb[i] = (float)y[i] + bias[i % D];
}

/// dw[i] = (accumulate ? dw[i] : 0) + float(dw16[i]).
__global__ void widen_kernel(const bf16* __restrict__ dw16, float* __restrict__ dw, size_t n, bool accumulate) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dw[i] = accumulate ? dw[i] + __bfloat162float(dw16[i]) : __bfloat162float(dw16[i]);
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { CUDNN_CHECK(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

/// One batch size's descriptors and algorithms.
struct Plan {
  TensorDesc x;       // [B, C, H, W] NCHW
  TensorDesc y;       // [B, D, g, g] with NHWC strides (= emb / demb rows)
  TensorDesc y_nchw;  // [B, D, g, g] packed NCHW (the transform route)
  bool fwd_direct = true, wgrad_direct = true;
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdFilterAlgo_t wgrad_algo{};
  size_t workspace = 0;
};

bool tensor_core_math(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

/// The first usable entry of cuDNN's ranked list (status success, workspace within the cap, no
/// tensor-core math when `strict`), preferring deterministic ones when `want_deterministic`;
/// nullptr when none.
template <typename Perf>
const Perf* pick(const Perf* perf, int n, bool strict, bool want_deterministic) {
  const Perf* any = nullptr;
  for (int i = 0; i < n; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace) continue;
    if (strict && tensor_core_math(p.mathType)) continue;
    if (!want_deterministic || p.determinism == CUDNN_DETERMINISTIC) return &p;
    if (!any) any = &p;
  }
  return any;
}

}  // namespace

struct CudnnPatchEmbed::Impl {
  PatchGeometry geo;  // batch = the maximum
  Precision precision;
  cudaStream_t stream;
  bool autotune;
  cudnnHandle_t handle = nullptr;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  std::map<int, std::unique_ptr<Plan>> plans;
  DeviceBuffer<char> workspace;
  DeviceBuffer<char> xkeep;    // the last forward's images, in dtype (for the weight gradient)
  DeviceBuffer<bf16> y16;      // bf16 conv output [B*Np, D] (bf16 mode)
  DeviceBuffer<bf16> dw16;     // bf16 weight gradient (bf16 mode)
  DeviceBuffer<char> reorder;  // NCHW output / gradient (transform route only)
  int last_batch = 0;

  size_t elem() const { return dtype == CUDNN_DATA_FLOAT ? 4 : 2; }

  Impl(const PatchGeometry& g, Precision p, cudaStream_t s, bool at)
      : geo(g), precision(p), stream(s), autotune(at) {
    if (g.batch < 1 || g.channels < 1 || g.patch < 1 || g.image % g.patch != 0 || g.hidden < 1)
      throw std::invalid_argument("CudnnPatchEmbed: bad geometry B=" + std::to_string(g.batch) +
                                  " C=" + std::to_string(g.channels) + " H=" + std::to_string(g.image) +
                                  " P=" + std::to_string(g.patch) + " D=" + std::to_string(g.hidden));
    dtype = p == Precision::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    CUDNN_CHECK(cudnnCreate(&handle));
    CUDNN_CHECK(cudnnSetStream(handle, stream));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, dtype, CUDNN_TENSOR_NCHW, g.hidden, g.channels, g.patch, g.patch));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, 0, 0, g.patch, g.patch, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    const cudnnMathType_t math = p == Precision::fp32   ? CUDNN_FMA_MATH
                                 : p == Precision::tf32 ? CUDNN_DEFAULT_MATH
                                                        : CUDNN_TENSOR_OP_MATH;
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math));
    const size_t pixels = (size_t)g.batch * g.channels * g.image * g.image;
    xkeep = DeviceBuffer<char>(pixels * elem(), "cuDNN patch embedding image copy");
    if (p == Precision::bf16) {
      y16 = DeviceBuffer<bf16>((size_t)g.batch * g.num_patches() * g.hidden, "cuDNN patch embedding bf16 output");
      dw16 = DeviceBuffer<bf16>((size_t)g.hidden * g.patch_dim(), "cuDNN patch embedding bf16 weight gradient");
    }
  }

  ~Impl() {
    plans.clear();
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (handle) cudnnDestroy(handle);
  }

  /// Grows `buf` to `bytes`. The old buffer is kept (retired), never freed before this object:
  /// queued work or a captured CUDA graph (the trainer's step graph) may still use its address.
  void grow(DeviceBuffer<char>& buf, size_t bytes, const char* what) {
    if (bytes <= buf.size()) return;
    retired.push_back(std::move(buf));
    buf = DeviceBuffer<char>(bytes, what);
  }
  std::vector<DeviceBuffer<char>> retired;  // outgrown buffers, alive as long as this object

  std::string op_name(const char* what, int B) const {
    return std::string("cuDNN patch embedding ") + what + " (B=" + std::to_string(B) + " C=" +
           std::to_string(geo.channels) + " " + std::to_string(geo.image) + "x" + std::to_string(geo.image) +
           " -> D=" + std::to_string(geo.hidden) + ", kernel=stride=" + std::to_string(geo.patch) + ", " +
           precision_name(precision) + ")";
  }

  const cudnnConvolutionFwdAlgoPerf_t* find_fwd(const Plan& p, cudnnTensorDescriptor_t y,
                                                cudnnConvolutionFwdAlgoPerf_t* perf, int& n) {
    const int req = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    n = 0;
    const cudnnStatus_t st =
        autotune ? cudnnFindConvolutionForwardAlgorithm(handle, p.x.d, w, conv, y, req, &n, perf)
                 : cudnnGetConvolutionForwardAlgorithm_v7(handle, p.x.d, w, conv, y, req, &n, perf);
    if (st != CUDNN_STATUS_SUCCESS) n = 0;
    return pick(perf, n, precision == Precision::fp32, false);
  }

  const cudnnConvolutionBwdFilterAlgoPerf_t* find_wgrad(const Plan& p, cudnnTensorDescriptor_t dy,
                                                        cudnnConvolutionBwdFilterAlgoPerf_t* perf, int& n) {
    const int req = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    n = 0;
    const cudnnStatus_t st =
        autotune ? cudnnFindConvolutionBackwardFilterAlgorithm(handle, p.x.d, dy, conv, w, req, &n, perf)
                 : cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, p.x.d, dy, conv, w, req, &n, perf);
    if (st != CUDNN_STATUS_SUCCESS) n = 0;
    return pick(perf, n, precision == Precision::fp32, true);
  }

  Plan& plan(int B) {
    if (B < 1 || B > geo.batch)
      throw std::invalid_argument("CudnnPatchEmbed: batch " + std::to_string(B) + " outside [1, " +
                                  std::to_string(geo.batch) + "]");
    auto it = plans.find(B);
    if (it != plans.end()) return *it->second;
    auto p = std::make_unique<Plan>();
    const int C = geo.channels, H = geo.image, D = geo.hidden, g = geo.grid();
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x.d, CUDNN_TENSOR_NCHW, dtype, B, C, H, H));
    CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(p->y.d, dtype, B, D, g, g, g * g * D, 1, g * D, D));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y_nchw.d, CUDNN_TENSOR_NCHW, dtype, B, D, g, g));
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t fperf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    const cudnnConvolutionFwdAlgoPerf_t* f = find_fwd(*p, p->y.d, fperf, n);
    if (!f) {
      p->fwd_direct = false;
      f = find_fwd(*p, p->y_nchw.d, fperf, n);
    }
    if (!f)
      throw std::runtime_error(launcher_rank_label() + ": " + op_name("forward", B) +
                               ": cuDNN " + cudnn_runtime_version() + " offers no usable algorithm (" +
                               std::to_string(n) + " candidates, none supported within " +
                               std::to_string(kMaxWorkspace >> 20) + " MiB of workspace" +
                               (precision == Precision::fp32 ? " without tensor-core math" : "") + ")");
    p->fwd_algo = f->algo;
    cudnnConvolutionBwdFilterAlgoPerf_t bperf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    const cudnnConvolutionBwdFilterAlgoPerf_t* b = find_wgrad(*p, p->y.d, bperf, n);
    if (!b) {
      p->wgrad_direct = false;
      b = find_wgrad(*p, p->y_nchw.d, bperf, n);
    }
    if (!b)
      throw std::runtime_error(launcher_rank_label() + ": " + op_name("weight gradient", B) +
                               ": cuDNN " + cudnn_runtime_version() + " offers no usable algorithm (" +
                               std::to_string(n) + " candidates)");
    p->wgrad_algo = b->algo;
    p->workspace = std::max(f->memory, b->memory);
    grow(workspace, p->workspace, "cuDNN patch embedding workspace");
    if (!p->fwd_direct || !p->wgrad_direct)
      grow(reorder, (size_t)geo.batch * geo.num_patches() * D * elem(), "cuDNN patch embedding NCHW scratch");
    return *plans.emplace(B, std::move(p)).first->second;
  }

  /// y (NHWC view, elements of dtype) = conv(x, weight).
  void conv_forward(Plan& p, const void* x, const void* weight, void* y) {
    const float one = 1.0f, zero = 0.0f;
    void* out = p.fwd_direct ? y : reorder.get();
    CUDNN_CHECK(cudnnConvolutionForward(handle, &one, p.x.d, x, w, weight, conv, p.fwd_algo, workspace.get(),
                                        workspace.size(), &zero, p.fwd_direct ? p.y.d : p.y_nchw.d, out));
    if (!p.fwd_direct) CUDNN_CHECK(cudnnTransformTensor(handle, &one, p.y_nchw.d, out, &zero, p.y.d, y));
  }

  /// dw (elements of dtype) = beta * dw + wgrad(x, dy), dy the NHWC view.
  void conv_wgrad(Plan& p, const void* x, const void* dy, void* dw, float beta) {
    const float one = 1.0f, zero = 0.0f;
    const void* g = dy;
    if (!p.wgrad_direct) {
      CUDNN_CHECK(cudnnTransformTensor(handle, &one, p.y.d, dy, &zero, p.y_nchw.d, reorder.get()));
      g = reorder.get();
    }
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, p.x.d, x, p.wgrad_direct ? p.y.d : p.y_nchw.d, g,
                                               conv, p.wgrad_algo, workspace.get(), workspace.size(), &beta, w,
                                               dw));
  }

  void check_last(int batch) const {
    if (batch != last_batch)
      throw std::invalid_argument("CudnnPatchEmbed::backward_weight: batch " + std::to_string(batch) +
                                  " is not the last forward's (" + std::to_string(last_batch) + ")");
  }

  void require(bool bf16_call, const char* what) const {
    if (bf16_call != (precision == Precision::bf16))
      throw std::invalid_argument(std::string("CudnnPatchEmbed::") + what + ": the " +
                                  (bf16_call ? "bf16" : "fp32") + " overload on an object of precision " +
                                  precision_name(precision));
  }
};

CudnnPatchEmbed::CudnnPatchEmbed(const PatchGeometry& g, Precision precision, cudaStream_t stream, bool autotune)
    : impl_(new Impl(g, precision, stream, autotune)) {}

CudnnPatchEmbed::~CudnnPatchEmbed() = default;

void CudnnPatchEmbed::prepare(int batch) { impl_->plan(batch); }

void CudnnPatchEmbed::forward(const float* images, const float* weight, const float* bias, float* emb, int batch) {
  Impl& s = *impl_;
  s.require(false, "forward");
  Plan& p = s.plan(batch);
  const size_t pixels = (size_t)batch * s.geo.channels * s.geo.image * s.geo.image;
  CUDA_CHECK(cudaMemcpyAsync(s.xkeep.get(), images, pixels * sizeof(float), cudaMemcpyDeviceToDevice, s.stream));
  s.conv_forward(p, s.xkeep.get(), weight, emb);
  const size_t rows = (size_t)batch * s.geo.num_patches();
  add_bias_kernel<float><<<grid_for(rows * s.geo.hidden, 256), 256, 0, s.stream>>>(emb, bias, emb, rows, s.geo.hidden);
  CUDA_CHECK_LAUNCH();
  s.last_batch = batch;
}

void CudnnPatchEmbed::forward(const float* images, const __nv_bfloat16* weight16, const float* bias, float* emb,
                              int batch) {
  Impl& s = *impl_;
  s.require(true, "forward");
  Plan& p = s.plan(batch);
  const size_t pixels = (size_t)batch * s.geo.channels * s.geo.image * s.geo.image;
  convert_to_bf16(images, reinterpret_cast<bf16*>(s.xkeep.get()), pixels, s.stream);
  s.conv_forward(p, s.xkeep.get(), weight16, s.y16.get());
  const size_t rows = (size_t)batch * s.geo.num_patches();
  add_bias_kernel<bf16><<<grid_for(rows * s.geo.hidden, 256), 256, 0, s.stream>>>(s.y16.get(), bias, emb, rows,
                                                                                  s.geo.hidden);
  CUDA_CHECK_LAUNCH();
  s.last_batch = batch;
}

void CudnnPatchEmbed::backward_weight(const float* demb, float* dw, bool accumulate, int batch) {
  Impl& s = *impl_;
  s.require(false, "backward_weight");
  s.check_last(batch);
  s.conv_wgrad(s.plan(batch), s.xkeep.get(), demb, dw, accumulate ? 1.0f : 0.0f);
}

void CudnnPatchEmbed::backward_weight(const __nv_bfloat16* demb, float* dw, bool accumulate, int batch) {
  Impl& s = *impl_;
  s.require(true, "backward_weight");
  s.check_last(batch);
  s.conv_wgrad(s.plan(batch), s.xkeep.get(), demb, s.dw16.get(), 0.0f);
  const size_t n = s.dw16.size();
  widen_kernel<<<grid_for(n, 256), 256, 0, s.stream>>>(s.dw16.get(), dw, n, accumulate);
  CUDA_CHECK_LAUNCH();
}

size_t CudnnPatchEmbed::device_bytes() const {
  const Impl& s = *impl_;
  size_t retired = 0;
  for (const auto& r : s.retired) retired += r.size();
  return s.workspace.size() + s.reorder.size() + s.xkeep.size() + (s.y16.size() + s.dw16.size()) * sizeof(bf16) +
         retired;
}

}  // namespace vitddp
