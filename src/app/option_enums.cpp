#include "src/app/option_enums.h"

namespace vitddp {
namespace {

template <typename E>
std::string name_of(E v) {
  for (const auto& [value, name] : enum_names<E>())
    if (value == v) return name;
  return "unknown";
}

}  // namespace

template <>
const std::vector<std::pair<Backend, std::string>>& enum_names<Backend>() {
  static const std::vector<std::pair<Backend, std::string>> n = {
      {Backend::Gpu, "gpu"}, {Backend::Cpu, "cpu"}, {Backend::Auto, "auto"}};
  return n;
}
template <>
const std::vector<std::pair<EvalSplit, std::string>>& enum_names<EvalSplit>() {
  static const std::vector<std::pair<EvalSplit, std::string>> n = {{EvalSplit::Test, "test"}, {EvalSplit::Train, "train"}};
  return n;
}
template <>
const std::vector<std::pair<AttentionChoice, std::string>>& enum_names<AttentionChoice>() {
  static const std::vector<std::pair<AttentionChoice, std::string>> n = {
      {AttentionChoice::Auto, "auto"}, {AttentionChoice::Cudnn, "cudnn"}, {AttentionChoice::Custom, "custom"},
      {AttentionChoice::Gemm, "gemm"}, {AttentionChoice::GemmRecompute, "gemm-recompute"}};
  return n;
}
template <>
const std::vector<std::pair<PatchEmbedChoice, std::string>>& enum_names<PatchEmbedChoice>() {
  static const std::vector<std::pair<PatchEmbedChoice, std::string>> n = {
      {PatchEmbedChoice::Auto, "auto"}, {PatchEmbedChoice::Cudnn, "cudnn"}, {PatchEmbedChoice::Gemm, "gemm"}};
  return n;
}
template <>
const std::vector<std::pair<RecomputeChoice, std::string>>& enum_names<RecomputeChoice>() {
  static const std::vector<std::pair<RecomputeChoice, std::string>> n = {
      {RecomputeChoice::Auto, "auto"}, {RecomputeChoice::On, "on"}, {RecomputeChoice::Off, "off"}};
  return n;
}
template <>
const std::vector<std::pair<Fp32Matmul, std::string>>& enum_names<Fp32Matmul>() {
  static const std::vector<std::pair<Fp32Matmul, std::string>> n = {{Fp32Matmul::Ieee, "ieee"},
                                                                    {Fp32Matmul::Tf32x3, "tf32x3"}};
  return n;
}
template <>
const std::vector<std::pair<OptimizerKind, std::string>>& enum_names<OptimizerKind>() {
  static const std::vector<std::pair<OptimizerKind, std::string>> n = {{OptimizerKind::Sgd, "sgd"}, {OptimizerKind::AdamW, "adamw"}};
  return n;
}
template <>
const std::vector<std::pair<NonfinitePolicy, std::string>>& enum_names<NonfinitePolicy>() {
  static const std::vector<std::pair<NonfinitePolicy, std::string>> n = {{NonfinitePolicy::Stop, "stop"}, {NonfinitePolicy::Skip, "skip"}};
  return n;
}
template <>
const std::vector<std::pair<FailMode, std::string>>& enum_names<FailMode>() {
  static const std::vector<std::pair<FailMode, std::string>> n = {
      {FailMode::Throw, "throw"}, {FailMode::Exit, "exit"}, {FailMode::NcclAbort, "nccl-abort"}};
  return n;
}
template <>
const std::vector<std::pair<Precision, std::string>>& enum_names<Precision>() {
  static const std::vector<std::pair<Precision, std::string>> n = {
      {Precision::fp32, "fp32"}, {Precision::tf32, "tf32"}, {Precision::bf16, "bf16"}};
  return n;
}
template <>
const std::vector<std::pair<Compression, std::string>>& enum_names<Compression>() {
  static const std::vector<std::pair<Compression, std::string>> n = {
      {Compression::None, "none"}, {Compression::Fp16, "fp16"}, {Compression::Bf16, "bf16"}, {Compression::PowerSgd, "powersgd"}};
  return n;
}
template <>
const std::vector<std::pair<AllReduceImpl, std::string>>& enum_names<AllReduceImpl>() {
  static const std::vector<std::pair<AllReduceImpl, std::string>> n = {{AllReduceImpl::Nccl, "nccl"}, {AllReduceImpl::CopyEngine, "copy-engine"}};
  return n;
}
template <>
const std::vector<std::pair<AllGatherDtype, std::string>>& enum_names<AllGatherDtype>() {
  static const std::vector<std::pair<AllGatherDtype, std::string>> n = {
      {AllGatherDtype::Auto, "auto"}, {AllGatherDtype::Fp32, "fp32"}, {AllGatherDtype::Bf16, "bf16"}};
  return n;
}
template <>
const std::vector<std::pair<LrScheduleKind, std::string>>& enum_names<LrScheduleKind>() {
  static const std::vector<std::pair<LrScheduleKind, std::string>> n = {
      {LrScheduleKind::Constant, "constant"}, {LrScheduleKind::WarmupCosine, "cosine"}};
  return n;
}
template <>
const std::vector<std::pair<InitScheme, std::string>>& enum_names<InitScheme>() {
  static const std::vector<std::pair<InitScheme, std::string>> n = {{InitScheme::Torchvision, "torchvision"}, {InitScheme::Random, "random"}};
  return n;
}

std::string to_string(Backend v) { return name_of(v); }
std::string to_string(EvalSplit v) { return name_of(v); }
std::string to_string(AttentionChoice v) { return name_of(v); }
std::string to_string(PatchEmbedChoice v) { return name_of(v); }
std::string to_string(RecomputeChoice v) { return name_of(v); }
std::string to_string(Fp32Matmul v) { return name_of(v); }
std::string to_string(OptimizerKind v) { return name_of(v); }
std::string to_string(NonfinitePolicy v) { return name_of(v); }
std::string to_string(FailMode v) { return name_of(v); }
std::string to_string(Precision v) { return name_of(v); }
std::string to_string(Compression v) { return name_of(v); }
std::string to_string(AllReduceImpl v) { return name_of(v); }
std::string to_string(AllGatherDtype v) { return name_of(v); }
std::string to_string(LrScheduleKind v) { return name_of(v); }
std::string to_string(InitScheme v) { return name_of(v); }

std::string to_string(const DataSpec& d) {
  switch (d.kind) {
    case DataSpec::Kind::synthetic: return "synthetic";
    case DataSpec::Kind::device: return "device";
    case DataSpec::Kind::idx: return "idx:" + d.dir;
  }
  return "unknown";
}

}  // namespace vitddp
