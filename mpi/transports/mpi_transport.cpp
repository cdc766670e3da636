#include "mpi/transports/mpi_transport.h"

#include <climits>
#include <stdexcept>
#include <string>

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
  void wait() override { MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE)); }
};

class MpiTransport final : public HostTransport {
 public:
  MpiTransport() { MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_)); }
  const char* name() const override { return "mpi"; }
  int world_size() const override { return world_size_; }

  std::unique_ptr<HostWork> start_sum(void* data, size_t count, DType t) override {
    auto w = std::make_unique<MpiWork>();
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, checked_count(count), mpi_datatype(t), op(t), MPI_COMM_WORLD,
                             &w->request));
    return w;
  }
  void sum(void* data, size_t count, DType t) override {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), mpi_datatype(t), op(t), MPI_COMM_WORLD));
  }

 private:
  static int checked_count(size_t count) {
    if (count > static_cast<size_t>(INT_MAX))
      throw std::invalid_argument("mpi transport: " + std::to_string(count) + " elements exceed MPI's int count");
    return static_cast<int>(count);
  }
  MPI_Op op(DType t) const { return t == DType::F32 ? MPI_SUM : half_ops_.op(t); }

  int world_size_ = 1;
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
