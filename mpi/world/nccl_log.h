// Which transport NCCL chose between this rank and its peers (P2P over NVLink/PCIe, SHM through
// host memory, NET over sockets/IB), read from NCCL's own INFO log.
#pragma once
#include <string>

namespace vitddp {

/// Before the first NCCL call: when the user has not set NCCL_DEBUG, asks NCCL to write its INFO
/// log (subsystems INIT and P2P, where it reports "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read")
/// to a private file, and returns that file's path; returns "" when NCCL_DEBUG is already set
/// (the user reads the log themselves and the transport is then recorded as "unknown").
std::string redirect_nccl_info_log(int rank);

/// Parses the log at `path` for the transports of this rank's channels and deletes the file.
/// NCCL connects lazily, so call it after the first collective. Returns e.g. "P2P" or "SHM" or
/// "NET" (several joined with '+', most frequent first), followed by the distinct detail strings in
/// brackets: "P2P [P2P/CUMEM/read]"; "none" when the log shows no channel (one rank), "unknown"
/// for an empty path or unreadable file.
std::string read_nccl_transport(const std::string& path);

}  // namespace vitddp
