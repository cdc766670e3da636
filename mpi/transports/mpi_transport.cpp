#include "mpi/transports/mpi_transport.h"

#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpi/hooks/half_host.h"
#include "mpi/transports/host_transport.h"
#include "mpi/world/world.h"

namespace vitddp {

namespace {

// MPI_User_function: inout[i] = round16(float(in[i]) + float(inout[i])).
void fp16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_fp16(fp16_to_float(a[i]) + fp16_to_float(b[i]));
}

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

class MpiWork final : public HostWork {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> counts, displs;  ///< a nonblocking collective's arrays live until its completion (MPI 4.0, 6.12)
  /// In-place reduce-scatter: MPI leaves this rank's result at the start of the buffer; it is
  /// moved to `to` (`bytes` long; nothing when `from` == `to`).
  const char* move_from = nullptr;
  char* move_to = nullptr;
  size_t move_bytes = 0;
  void wait() override {
    MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
    if (move_to != move_from && move_bytes) std::memmove(move_to, move_from, move_bytes);
  }
};

class MpiTransport final : public HostTransport {
 public:
  MpiTransport() {
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  }
  const char* name() const override { return "mpi"; }
  int world_size() const override { return world_size_; }
  int rank() const override { return rank_; }

  std::unique_ptr<HostWork> start_sum(void* data, size_t count, DType t) override {
    auto w = std::make_unique<MpiWork>();
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, checked_count(count), mpi_datatype(t), op(t), MPI_COMM_WORLD,
                             &w->request));
    return w;
  }
  void sum(void* data, size_t count, DType t) override {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), mpi_datatype(t), op(t), MPI_COMM_WORLD));
  }
  std::unique_ptr<HostWork> start_reduce_scatter(void* data, const std::vector<size_t>& counts, DType t) override {
    auto w = std::make_unique<MpiWork>();
    w->counts = per_rank(counts, "reduce-scatter counts");
    // MPI_IN_PLACE (MPI 4.0, 6.10.1): the input is the whole receive buffer, the rank's result
    // lands at its start; wait() moves it to the rank's own chunk.
    size_t before = 0;
    for (int r = 0; r < rank_; ++r) before += counts[r];
    const size_t bytes = dtype_bytes(t);
    w->move_from = static_cast<const char*>(data);
    w->move_to = static_cast<char*>(data) + before * bytes;
    w->move_bytes = counts[rank_] * bytes;
    MPI_CHECK(MPI_Ireduce_scatter(MPI_IN_PLACE, data, w->counts.data(), mpi_datatype(t), op(t), MPI_COMM_WORLD,
                                  &w->request));
    return w;
  }
  std::unique_ptr<HostWork> start_all_gather(void* data, const std::vector<size_t>& counts,
                                             const std::vector<size_t>& displs, DType t) override {
    auto w = std::make_unique<MpiWork>();
    w->counts = per_rank(counts, "all-gather counts");
    w->displs = per_rank(displs, "all-gather displacements");
    // MPI_IN_PLACE: each rank's contribution is already where it is gathered to (send arguments ignored).
    MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, mpi_datatype(t), data, w->counts.data(), w->displs.data(),
                              mpi_datatype(t), MPI_COMM_WORLD, &w->request));
    return w;
  }

 private:
  static int checked_count(size_t count) {
    if (count > static_cast<size_t>(INT_MAX))
      throw std::invalid_argument("mpi transport: " + std::to_string(count) + " elements exceed MPI's int count");
    return static_cast<int>(count);
  }
  /// One int per rank (MPI's counts and displacements); std::invalid_argument otherwise.
  std::vector<int> per_rank(const std::vector<size_t>& v, const char* what) const {
    if (v.size() != (size_t)world_size_)
      throw std::invalid_argument(std::string("mpi transport: ") + what + " for " + std::to_string(v.size()) +
                                  " ranks, the world has " + std::to_string(world_size_));
    std::vector<int> out;
    for (size_t x : v) out.push_back(checked_count(x));
    return out;
  }
  MPI_Op op(DType t) const { return t == DType::F32 ? MPI_SUM : half_ops_.op(t); }

  int world_size_ = 1, rank_ = 0;
  Mpi16BitSumOps half_ops_;
};

}  // namespace

Mpi16BitSumOps::Mpi16BitSumOps() {
  MPI_CHECK(MPI_Op_create(&fp16_sum, 1, &fp16_));
  MPI_CHECK(MPI_Op_create(&bf16_sum, 1, &bf16_));
}

Mpi16BitSumOps::~Mpi16BitSumOps() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (fp16_ != MPI_OP_NULL) MPI_Op_free(&fp16_);
  if (bf16_ != MPI_OP_NULL) MPI_Op_free(&bf16_);
}

MPI_Op Mpi16BitSumOps::op(DType t) const {
  require_16bit(t, "Mpi16BitSumOps");
  return t == DType::F16 ? fp16_ : bf16_;
}

MPI_Datatype mpi_datatype(DType t) { return t == DType::F32 ? MPI_FLOAT : MPI_UINT16_T; }

/// The registry's factory (mpi/transports/host_registry.cpp).
std::unique_ptr<HostTransport> make_mpi_transport() { return std::make_unique<MpiTransport>(); }

}  // namespace vitddp
