// Parsing NCCL's INFO log for the transport of each channel (mpi/world/nccl_log.h: read_nccl_transport).
#include <cstdio>
#include <fstream>

#include "mpi/world/nccl_log.h"
#include "tests/catch.h"

using namespace vitddp;

namespace {
std::string write_log(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/vitddp-test-" + name + ".log";
  std::ofstream(path) << text;
  return path;
}
}  // namespace

TEST_CASE("transport is read from NCCL's channel lines", "[transport]") {
  // Lines as NCCL 2.28 prints them (the seed article shows the same format).
  const auto p2p = write_log("p2p",
                             "host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
                             "host:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
                             "host:1:2 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1\n");
  CHECK(read_nccl_transport(p2p) == "P2P [P2P/CUMEM/read]");
  std::ifstream gone(p2p);
  CHECK_FALSE(gone.good());  // the private log is deleted after reading
  const auto shm = write_log("shm", "h:1:2 [1] NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct\n");
  CHECK(read_nccl_transport(shm) == "SHM [SHM/direct/direct]");
  const auto net = write_log("net",
                             "h:1:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/Socket/0\n"
                             "h:1:2 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] [send] via NET/Socket/0\n"
                             "h:1:2 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [receive] via NET/Socket/0\n");
  CHECK(read_nccl_transport(net) == "NET [NET/Socket/0]");
  const auto one = write_log("one", "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 1 nNodes 1\n");
  CHECK(read_nccl_transport(one) == "none");
  CHECK(read_nccl_transport("") == "unknown");
  CHECK(read_nccl_transport("/tmp/vitddp-no-such-file.log") == "unknown");
}
