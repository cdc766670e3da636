// NVTX injection library that records push/pop ranges to a text file, so that tests can check the
// NVTX ranges vitddp emits without nsys.
//
// How NVTX3 finds it (nvtx3/nvtxDetail/nvtxInit.h): the first NVTX call of a process (per copy of
// the header-only NVTX globals) reads NVTX_INJECTION64_PATH, dlopen()s that library, looks up the
// C symbol "InitializeInjectionNvtx2" and calls it with nvtxGetExportTable. Through the
// NVTX_ETID_CALLBACKS export table the library obtains the CORE module's function table: an array
// of pointers to the process's implementation function pointers, indexed by NVTX_CBID_CORE_*. We
// replace RangePushEx, RangePushA, RangePushW and RangePop; every other entry stays unassigned and
// NVTX turns it into a no-op. Returning 1 means success (0 makes NVTX unload the library).
//
// Output: VITDDP_NVTX_LOG names the file; "%r" in it becomes the MPI rank (OMPI_COMM_WORLD_RANK,
// PMIX_RANK, PMI_RANK or SLURM_PROCID) and "%p" the process id, so that every rank of
// `mpirun -x VITDDP_NVTX_LOG=nvtx.%r.log` writes its own file. Lines (one write(2) each, O_APPEND):
//   # nvtx_recorder pid <pid> rank <rank>
//   <tid> push <message>
//   <tid> pop
// where <tid> is the kernel thread id (gettid). Without VITDDP_NVTX_LOG it writes to stderr.
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cwchar>
#include <mutex>
#include <string>

#include <nvtx3/nvToolsExt.h>  // the NVTX types (nvtxEventAttributes_t, export tables, callback ids)

namespace {

int g_fd = -1;
std::once_flag g_open_once;
thread_local int t_depth = 0;  ///< ranges this thread has open (push returns the 0-based level)

/// The MPI rank from the launcher's environment, or "" when not started by one.
std::string rank_from_env() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v)) return s;
  return "";
}

/// VITDDP_NVTX_LOG with %r -> rank and %p -> pid expanded.
std::string log_path() {
  const char* tmpl = std::getenv("VITDDP_NVTX_LOG");
  if (!tmpl || !*tmpl) return "";
  std::string out;
  for (const char* c = tmpl; *c; ++c) {
    if (c[0] == '%' && c[1] == 'r') {
      const std::string r = rank_from_env();
      out += r.empty() ? std::to_string(getpid()) : r;
      ++c;
    } else if (c[0] == '%' && c[1] == 'p') {
      out += std::to_string(getpid());
      ++c;
    } else {
      out += *c;
    }
  }
  return out;
}

/// Writes one whole line with a single write(2), so lines of different threads never interleave.
void write_line(const std::string& line) {
  std::call_once(g_open_once, [] {
    const std::string path = log_path();
    g_fd = path.empty() ? 2 : open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (g_fd < 0) {
      std::fprintf(stderr, "nvtx_recorder: cannot open '%s': %s\n", path.c_str(), std::strerror(errno));
      return;
    }
    const std::string r = rank_from_env();
    const std::string head = "# nvtx_recorder pid " + std::to_string(getpid()) + " rank " + (r.empty() ? "-" : r) + "\n";
    (void)!write(g_fd, head.data(), head.size());
  });
  if (g_fd < 0) return;
  (void)!write(g_fd, line.data(), line.size());
}

long thread_id() { return static_cast<long>(syscall(SYS_gettid)); }

int record_push(const std::string& message) {
  // Newlines would break the line format; NVTX messages here never contain any.
  std::string m = message;
  for (char& c : m)
    if (c == '\n' || c == '\r') c = ' ';
  write_line(std::to_string(thread_id()) + " push " + m + "\n");
  return t_depth++;
}

std::string narrow(const wchar_t* w) {
  std::string s;
  for (; w && *w; ++w) s += (*w < 128) ? static_cast<char>(*w) : '?';
  return s;
}

int NVTX_API push_ex(const nvtxEventAttributes_t* a) {
  if (!a) return record_push("<null attributes>");
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: return record_push(a->message.ascii ? a->message.ascii : "");
    case NVTX_MESSAGE_TYPE_UNICODE: return record_push(narrow(a->message.unicode));
    default: return record_push("<registered or unknown message type>");
  }
}
int NVTX_API push_a(const char* m) { return record_push(m ? m : ""); }
int NVTX_API push_w(const wchar_t* m) { return record_push(narrow(m)); }
int NVTX_API pop() {
  write_line(std::to_string(thread_id()) + " pop\n");
  return t_depth > 0 ? --t_depth : -1;  // NVTX: a pop without a push returns a negative value
}

}  // namespace

/// NVTX's entry point: called once per copy of the NVTX globals in the process (the executable,
/// and every shared library that carries its own NVTX3 headers, e.g. NCCL).
extern "C" NVTX_DYNAMIC_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  if (!get_export_table) return 0;
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || callbacks->struct_size < sizeof(NvtxExportTableCallbacks) || !callbacks->GetModuleFunctionTable)
    return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || !table) return 0;
  // size == NVTX_CBID_CORE_SIZE: ids 1..size-1 are valid (0 is INVALID; the table has a null at [size]).
  auto set = [&](unsigned id, NvtxFunctionPointer fn) {
    if (id < size && table[id]) *table[id] = fn;
  };
  set(NVTX_CBID_CORE_RangePushEx, reinterpret_cast<NvtxFunctionPointer>(&push_ex));
  set(NVTX_CBID_CORE_RangePushA, reinterpret_cast<NvtxFunctionPointer>(&push_a));
  set(NVTX_CBID_CORE_RangePushW, reinterpret_cast<NvtxFunctionPointer>(&push_w));
  set(NVTX_CBID_CORE_RangePop, reinterpret_cast<NvtxFunctionPointer>(&pop));
  return 1;
}
