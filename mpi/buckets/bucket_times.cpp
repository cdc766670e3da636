#include "mpi/buckets/bucket_times.h"

namespace vitddp {

void BucketTimes::resize(size_t n) {
  start_ms.assign(n, 0.0);
  end_ms.assign(n, 0.0);
  bytes_sent.assign(n, 0);
  compressed.assign(n, 0);
  compress_ms.assign(n, 0.0);
  allreduce_ms.assign(n, 0.0);
  copy_ms.assign(n, 0.0);
  reduce_scattered.assign(n, 0);
  allgather_start_ms.assign(n, 0.0);
  allgather_end_ms.assign(n, 0.0);
  allgather_ms.assign(n, 0.0);
  allgather_bytes.assign(n, 0);
}

}  // namespace vitddp
