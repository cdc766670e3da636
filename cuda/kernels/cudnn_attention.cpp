// cuDNN fused attention (SDPA forward / backward graphs of the cudnn-frontend) on the packed qkv
// layout; see cuda/kernels/cudnn_attention.h. Compiled by the host compiler: the frontend is header-only
// C++ over cudnn_graph.h (libcudnn).
#include "cuda/kernels/cudnn_attention.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>
#include <tuple>
#include <unordered_map>

#include "cuda/check/check_cuda.h"
#include "cuda/check/check_cudnn.h"
#include "cuda/check/cudnn_version.h"
#include "cuda/kernels/event_pair.h"
#include "cuda/model/device_buffer.h"

namespace vitddp {
namespace {
namespace fe = cudnn_frontend;

// Tensor uids of the variant packs.
enum : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

/// (batch, T, heads, head_dim, backward?)
using GraphKey = std::tuple<int, int, int, int, bool>;

std::string shape_text(int B, int T, int H, int dh) {
  return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
         " dh=" + std::to_string(dh);
}

void check_shape(int B, int T, int H, int dh, const char* what) {
  if (B < 1 || T < 1 || H < 1 || dh < 1 || dh > 256 || dh % 8 != 0)
    throw std::invalid_argument(std::string(what) + ": unsupported shape " + shape_text(B, T, H, dh) +
                                " (needs B, T, H >= 1 and head_dim a multiple of 8 up to 256)");
}

/// "SDPA forward graph (B=.. T=.. H=.. dh=.., bf16)", or backward: the operation in error messages.
std::string graph_name(int B, int T, int H, int dh, bool backward) {
  return std::string(backward ? "SDPA backward" : "SDPA forward") + " graph (" + shape_text(B, T, H, dh) + ", bf16)";
}

/// Throws naming the operation, the stage and cuDNN's message when `e` is an error.
void fe_check(fe::error_t e, const std::string& op, const char* stage) {
  if (e.is_bad())
    throw std::runtime_error(launcher_rank_label() + ": cuDNN " + op + ": " + stage + " failed: " +
                             e.get_message() + " (cuDNN " + cudnn_runtime_version() + ")");
}

/// Q, K or V (offset 0, D or 2D elements into qkv) as [B, H, T, dh] with the packed strides.
std::shared_ptr<fe::graph::Tensor_attributes> qkv_view(fe::graph::Graph& g, const char* name,
                                                       int64_t uid, int64_t B, int64_t T,
                                                       int64_t H, int64_t dh) {
  const int64_t D = H * dh;
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({B, H, T, dh})
                      .set_stride({T * 3 * D, dh, 3 * D, 1}));
}

/// O or dO: [B, H, T, dh] inside the [B*T, D] heads-concatenated layout.
std::vector<int64_t> out_strides(int64_t T, int64_t H, int64_t dh) {
  const int64_t D = H * dh;
  return {T * D, dh, D, 1};
}

std::vector<int64_t> stats_strides(int64_t T, int64_t H) { return {H * T, T, 1, 1}; }

/// A new SDPA graph (bf16 tensors, fp32 intermediates and compute) with the packed Q, K and V of
/// [B, T, 3 H dh] declared as its inputs.
struct QkvGraph {
  std::shared_ptr<fe::graph::Graph> g;
  std::shared_ptr<fe::graph::Tensor_attributes> Q, K, V;
};
QkvGraph new_qkv_graph(int64_t B, int64_t T, int64_t H, int64_t dh) {
  QkvGraph q;
  q.g = std::make_shared<fe::graph::Graph>();
  q.g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  q.Q = qkv_view(*q.g, "Q", kQ, B, T, H, dh);
  q.K = qkv_view(*q.g, "K", kK, B, T, H, dh);
  q.V = qkv_view(*q.g, "V", kV, B, T, H, dh);
  return q;
}

/// Each distinct plan of g (built with BuildPlanPolicy_t::ALL; heuristics modes A and FALLBACK may
/// list a configuration twice: its second index is left out) run `reps` times on `pack` after one
/// warm-up call, on the handle's stream: index, name, ms per call or the error; `chosen` marks the
/// plan g.execute() runs (the frontend's candidate: the first plan that built). Synchronises the
/// stream, which must not be capturing.
std::vector<CudnnAttention::PlanTime> time_each_plan(fe::graph::Graph& g, cudnnHandle_t handle, cudaStream_t stream,
                                                     std::unordered_map<int64_t, void*>& pack, void* ws, int reps) {
  std::string chosen;
  if (g.get_plan_name(chosen).is_bad()) chosen.clear();
  EventPair ev;
  std::vector<CudnnAttention::PlanTime> times;
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    CudnnAttention::PlanTime t;
    t.index = i;
    if (g.get_plan_name_at_index(i, t.name).is_bad()) t.name = "plan " + std::to_string(i);
    bool seen = false;
    for (const CudnnAttention::PlanTime& u : times) seen = seen || u.name == t.name;
    if (seen) continue;
    fe::error_t e = g.execute_plan_at_index(handle, pack, ws, i);  // warm-up
    if (e.is_good()) {
      ev.record_start(stream);
      for (int r = 0; r < reps && e.is_good(); ++r) e = g.execute_plan_at_index(handle, pack, ws, i);
      ev.record_stop(stream);
      const float ms = ev.elapsed_ms();
      if (e.is_good()) t.ms = ms / reps;
      t.chosen = !chosen.empty() && t.name == chosen;
    }
    if (e.is_bad()) t.error = e.get_message();
    times.push_back(t);
  }
  return times;
}

/// The workspace every plan of g can run with (the frontend's own part plus the largest plan's;
/// bytes, at least 1).
int64_t largest_plan_workspace(const fe::graph::Graph& g) {
  return std::max<int64_t>(1, g.get_autotune_workspace_size());
}

}  // namespace

struct CudnnAttention::Impl {
  cudaStream_t stream = nullptr;
  bool deterministic = false;
  cudnnHandle_t handle = nullptr;
  std::map<GraphKey, std::shared_ptr<fe::graph::Graph>> graphs;
  DeviceBuffer<char> workspace;
  std::vector<DeviceBuffer<char>> retired;  // outgrown workspaces, alive as long as this object

  ~Impl() {
    if (handle) cudnnDestroy(handle);
  }

  std::shared_ptr<fe::graph::Graph> build_forward(int B, int T, int H, int dh) {
    auto [g, Q, K, V] = new_qkv_graph(B, T, H, dh);
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("vit_attention_forward")
                    .set_generate_stats(true)
                    .set_attn_scale(1.0f / std::sqrt((float)dh));
    auto [O, Stats] = g->sdpa(Q, K, V, opts);
    O->set_output(true).set_uid(kO).set_dim({B, H, T, dh}).set_stride(out_strides(T, H, dh));
    Stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim({B, H, T, 1})
        .set_stride(stats_strides(T, H));
    return g;
  }

  std::shared_ptr<fe::graph::Graph> build_backward(int B, int T, int H, int dh) {
    auto [g, Q, K, V] = new_qkv_graph(B, T, H, dh);
    auto O = g->tensor(fe::graph::Tensor_attributes().set_name("O").set_uid(kO).set_dim({B, H, T, dh}).set_stride(out_strides(T, H, dh)));
    auto dO = g->tensor(fe::graph::Tensor_attributes().set_name("dO").set_uid(kdO).set_dim({B, H, T, dh}).set_stride(out_strides(T, H, dh)));
    auto Stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("Stats")
                               .set_uid(kStats)
                               .set_dim({B, H, T, 1})
                               .set_stride(stats_strides(T, H))
                               .set_data_type(fe::DataType_t::FLOAT));
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("vit_attention_backward")
                    .set_attn_scale(1.0f / std::sqrt((float)dh));
    if (deterministic) opts.set_deterministic_algorithm(true);
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, opts);
    const int64_t D = (int64_t)H * dh;
    const std::vector<int64_t> dims{B, H, T, dh}, strides{(int64_t)T * 3 * D, dh, 3 * D, 1};
    dQ->set_output(true).set_uid(kdQ).set_dim(dims).set_stride(strides);
    dK->set_output(true).set_uid(kdK).set_dim(dims).set_stride(strides);
    dV->set_output(true).set_uid(kdV).set_dim(dims).set_stride(strides);
    return g;
  }

  /// A new graph of this key, validated and lowered, with the execution plans of cuDNN's
  /// heuristics (modes A and FALLBACK): only their first choice built, or all of them (`all_plans`).
  std::shared_ptr<fe::graph::Graph> build(int B, int T, int H, int dh, bool backward, bool all_plans) {
    const std::string op = graph_name(B, T, H, dh, backward);
    std::shared_ptr<fe::graph::Graph> g;
    try {
      g = backward ? build_backward(B, T, H, dh) : build_forward(B, T, H, dh);
    } catch (const std::exception& e) {  // the frontend throws on some attribute errors
      throw std::runtime_error(launcher_rank_label() + ": cuDNN " + op + ": definition failed: " + e.what());
    }
    fe_check(g->validate(), op, "validate");
    fe_check(g->build_operation_graph(handle), op, "build_operation_graph");
    fe_check(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), op,
             "create_execution_plans");
    fe_check(g->check_support(), op, "check_support (no engine of this cuDNN supports the graph on this GPU)");
    fe_check(g->build_plans(all_plans ? fe::BuildPlanPolicy_t::ALL : fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), op,
             "build_plans");
    return g;
  }

  /// The cached graph of this key, built (and the workspace grown) on first use.
  fe::graph::Graph& graph(int B, int T, int H, int dh, bool backward) {
    const GraphKey key{B, T, H, dh, backward};
    auto it = graphs.find(key);
    if (it != graphs.end()) return *it->second;
    std::shared_ptr<fe::graph::Graph> g = build(B, T, H, dh, backward, false);
    int64_t ws = 0;
    fe_check(g->get_workspace_size(ws), graph_name(B, T, H, dh, backward), "get_workspace_size");
    if ((size_t)ws > workspace.size()) {
      // The old workspace is kept, not freed: queued work or a captured CUDA graph (the trainer's
      // step graph, captured at max_batch; a later evaluation batch may need a new graph) may
      // still use its address.
      retired.push_back(std::move(workspace));
      workspace = DeviceBuffer<char>((size_t)ws, "cuDNN attention workspace");
    }
    graphs.emplace(key, g);
    return *g;
  }

  void execute(fe::graph::Graph& g, std::unordered_map<int64_t, void*>& pack, int B, int T, int H, int dh,
               bool backward) {
    fe_check(g.execute(handle, pack, workspace.get()), graph_name(B, T, H, dh, backward), "execute");
  }
};

CudnnAttention::CudnnAttention(cudaStream_t stream, bool deterministic_backward) : impl_(new Impl) {
  impl_->stream = stream;
  impl_->deterministic = deterministic_backward;
  CUDNN_CHECK(cudnnCreate(&impl_->handle));
  CUDNN_CHECK(cudnnSetStream(impl_->handle, stream));
}

CudnnAttention::~CudnnAttention() = default;

size_t CudnnAttention::stats_floats(int batch, int T, int heads) {
  return (size_t)batch * heads * T;
}

void CudnnAttention::prepare(int batch, int T, int heads, int head_dim) {
  check_shape(batch, T, heads, head_dim, "CudnnAttention::prepare");
  impl_->graph(batch, T, heads, head_dim, false);
  impl_->graph(batch, T, heads, head_dim, true);
}

namespace {
std::unordered_map<int64_t, void*> forward_pack(const __nv_bfloat16* qkv, float* stats, __nv_bfloat16* out, size_t D) {
  auto* q = const_cast<__nv_bfloat16*>(qkv);
  return {{kQ, q}, {kK, q + D}, {kV, q + 2 * D}, {kO, out}, {kStats, stats}};
}
std::unordered_map<int64_t, void*> backward_pack(const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* stats,
                                                 const __nv_bfloat16* dout, __nv_bfloat16* dqkv, size_t D) {
  auto* q = const_cast<__nv_bfloat16*>(qkv);
  return {{kQ, q},
          {kK, q + D},
          {kV, q + 2 * D},
          {kO, const_cast<__nv_bfloat16*>(out)},
          {kdO, const_cast<__nv_bfloat16*>(dout)},
          {kStats, const_cast<float*>(stats)},
          {kdQ, dqkv},
          {kdK, dqkv + D},
          {kdV, dqkv + 2 * D}};
}
}  // namespace

void CudnnAttention::forward(const __nv_bfloat16* qkv, float* stats, __nv_bfloat16* out, int batch,
                             int T, int heads, int head_dim) {
  check_shape(batch, T, heads, head_dim, "CudnnAttention::forward");
  fe::graph::Graph& g = impl_->graph(batch, T, heads, head_dim, false);
  auto pack = forward_pack(qkv, stats, out, (size_t)heads * head_dim);
  impl_->execute(g, pack, batch, T, heads, head_dim, false);
}

void CudnnAttention::backward(const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* stats,
                              const __nv_bfloat16* dout, __nv_bfloat16* dqkv, int batch, int T,
                              int heads, int head_dim) {
  check_shape(batch, T, heads, head_dim, "CudnnAttention::backward");
  fe::graph::Graph& g = impl_->graph(batch, T, heads, head_dim, true);
  auto pack = backward_pack(qkv, out, stats, dout, dqkv, (size_t)heads * head_dim);
  impl_->execute(g, pack, batch, T, heads, head_dim, true);
}

std::vector<CudnnAttention::PlanTime> CudnnAttention::time_plans(const __nv_bfloat16* qkv, __nv_bfloat16* out,
                                                                 float* stats, const __nv_bfloat16* dout,
                                                                 __nv_bfloat16* dqkv, int batch, int T, int heads,
                                                                 int head_dim, bool backward, int reps) {
  check_shape(batch, T, heads, head_dim, "CudnnAttention::time_plans");
  if (reps < 1) throw std::invalid_argument("CudnnAttention::time_plans: reps must be >= 1");
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(impl_->stream, &capturing));
  if (capturing != cudaStreamCaptureStatusNone)
    throw std::logic_error("CudnnAttention::time_plans: the stream is being captured into a CUDA graph");
  std::shared_ptr<fe::graph::Graph> g = impl_->build(batch, T, heads, head_dim, backward, true);
  const size_t D = (size_t)heads * head_dim;
  auto pack = backward ? backward_pack(qkv, out, stats, dout, dqkv, D) : forward_pack(qkv, stats, out, D);
  DeviceBuffer<char> ws((size_t)largest_plan_workspace(*g), "cuDNN attention plan-timing workspace");
  return time_each_plan(*g, impl_->handle, impl_->stream, pack, ws.get(), reps);
}

size_t CudnnAttention::device_bytes() const {
  size_t b = impl_->workspace.size();
  for (const auto& r : impl_->retired) b += r.size();
  return b;
}

size_t CudnnAttention::graph_count() const { return impl_->graphs.size(); }

}  // namespace vitddp
