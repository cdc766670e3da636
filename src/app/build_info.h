// What was built: the git commit of the sources, stamped at build time (src/app/build_info.cmake).
#pragma once

namespace vitddp {

/// `git rev-parse --short HEAD` of the source tree when this binary was built, with "-dirty"
/// when tracked files differed from HEAD; "unknown" when built outside a git checkout. Written
/// to every results file (attribute git_commit) and checkpoint, and printed by --version.
const char* vitddp_git_commit();

}  // namespace vitddp
