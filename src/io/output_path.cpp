#include "src/io/output_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>

namespace vitddp {

namespace fs = std::filesystem;

fs::path output_directory(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

std::string output_directory_problem(const std::string& what, const std::string& path) {
  const fs::path parent = output_directory(path);
  const std::string dir = "directory '" + parent.string() + "'";
  std::error_code ec;
  if (!fs::exists(parent, ec)) return what + ": " + dir + " does not exist";
  if (!fs::is_directory(parent, ec)) return what + ": '" + parent.string() + "' is not a directory";
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    return what + ": " + dir + " is not writable (" + std::strerror(errno) + ")";
  return "";
}

fs::path resolved_path(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  fs::path dir = output_directory(path);
  char buf[PATH_MAX];
  fs::path resolved = ::realpath(dir.c_str(), buf) ? fs::path(buf) / p.filename()
                                                   : fs::absolute(p, ec).lexically_normal();
  if (fs::is_symlink(fs::symlink_status(resolved, ec))) {
    const fs::path target = fs::canonical(resolved, ec);
    if (!ec) return target;
  }
  return resolved;
}

namespace {

/// What the rules look at for one output.
struct Candidate {
  const OutputFile& out;
  fs::path resolved;
  bool resolved_is_resume;  // the resolved path is the --resume file
};

const char* kind_of(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

std::string quoted(const Candidate& c) { return c.out.option + ": '" + c.out.path + "'"; }

std::string directory_rule(const Candidate& c) { return output_directory_problem(c.out.option, c.out.path); }

std::string dangling_link_rule(const Candidate& c) {
  struct stat l, s;
  if (::lstat(c.out.path.c_str(), &l) == 0 && S_ISLNK(l.st_mode) && ::stat(c.out.path.c_str(), &s) != 0)
    return quoted(c) + " is a symbolic link to a missing file";
  return "";
}

// Both paths exist and name the same file (device and inode): a hard link, or the same path.
bool same_inode(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

std::string scratch_rule(const Candidate& c) {
  struct stat l;
  if (!c.out.opened_in_place || ::lstat(c.out.path.c_str(), &l) != 0) return "";
  if (S_ISLNK(l.st_mode)) return quoted(c) + " is a symbolic link: remove it (vitddp writes its scratch file there)";
  if (S_ISREG(l.st_mode) && l.st_nlink > 1)
    return quoted(c) + " has other hard links (another file's name): remove it (vitddp writes its scratch file there)";
  return "";
}

std::string regular_file_rule(const Candidate& c) {
  struct stat s;
  if (::stat(c.out.path.c_str(), &s) != 0 || S_ISREG(s.st_mode)) return "";
  if (S_ISDIR(s.st_mode)) return quoted(c) + " is a directory; give the path of a file to write";
  return quoted(c) + " is not a regular file (" + kind_of(s.st_mode) + ")";
}

}  // namespace

std::string input_file_problem(const std::string& option, const std::string& path) {
  struct stat s;
  if (path.empty() || ::stat(path.c_str(), &s) != 0 || S_ISREG(s.st_mode)) return "";
  if (S_ISDIR(s.st_mode)) return option + ": '" + path + "' is a directory";
  return option + ": '" + path + "' is not a regular file (" + kind_of(s.st_mode) + ")";
}

std::vector<OutputFile> with_scratch_files(std::vector<OutputFile> outputs) {
  const size_t n = outputs.size();
  for (size_t i = 0; i < n; ++i) {
    const OutputFile& o = outputs[i];
    if (!o.path.empty() && (o.option == "--save-weights" || o.option == "--trace" || o.option == "--checkpoint-path"))
      outputs.push_back(OutputFile{o.option + " (scratch file)", o.path + ".tmp", false, true, o.option == "--trace"});
  }
  return outputs;
}

std::string output_paths_problem(const std::vector<OutputFile>& outputs, const std::vector<InputFile>& inputs,
                                 bool overwrite) {
  std::vector<std::pair<fs::path, const InputFile*>> ins;
  fs::path resume;
  for (const InputFile& in : inputs) {
    if (in.path.empty()) continue;
    ins.emplace_back(resolved_path(in.path), &in);
    if (in.option == "--resume") resume = ins.back().first;
  }
  std::vector<Candidate> cands;
  for (const OutputFile& o : outputs) {
    if (o.path.empty()) continue;
    fs::path r = resolved_path(o.path);
    const bool is_resume = !resume.empty() && r == resume;
    cands.push_back(Candidate{o, std::move(r), is_resume});
  }
  std::map<fs::path, const OutputFile*> seen;  // resolved path -> first output there
  const std::vector<std::function<std::string(const Candidate&)>> rules = {
      directory_rule,
      dangling_link_rule,
      regular_file_rule,
      [&ins](const Candidate& c) -> std::string {  // an input
        for (const auto& [path, in] : ins)
          if ((path == c.resolved || same_inode(c.out.path, in->path)) &&
              !(c.out.may_replace_resume && in->option == "--resume"))
            return quoted(c) + " is the " + in->option + " file, an input of this run: it is never overwritten, "
                   "not even with --overwrite";
        return "";
      },
      [&seen](const Candidate& c) -> std::string {  // two outputs
        const auto [it, fresh] = seen.emplace(c.resolved, &c.out);
        if (fresh || it->second == &c.out) return "";
        return quoted(c) + " is also the " + it->second->option + " file; give each output its own path";
      },
      [overwrite](const Candidate& c) -> std::string {  // exists
        std::error_code ec;
        if (overwrite || c.out.scratch || (c.out.may_replace_resume && c.resolved_is_resume)) return "";
        if (!fs::exists(fs::symlink_status(c.out.path, ec))) return "";
        return quoted(c) + " exists (use --overwrite to replace it)";
      },
      scratch_rule,
  };
  for (const auto& rule : rules)
    for (const Candidate& c : cands)
      if (std::string e = rule(c); !e.empty()) return e;
  return "";
}

std::string creation_trial_problem(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return "'" + path + "' cannot be created (" + std::strerror(errno) + ")";
  ::unlink(path.c_str());
  ::close(fd);
  return "";
}

std::string output_creation_problem(const std::vector<OutputFile>& outputs) {
  // Per option, the output with the longest file name (a {step} pattern's files differ in their
  // digits only): enough to find a name over the limit without creating thousands of files.
  std::map<std::string, const OutputFile*> longest;
  for (const OutputFile& o : outputs) {
    if (o.path.empty() || o.option == "--out") continue;  // --out: ResultsFile::create_trial_problem
    const OutputFile*& l = longest[o.option];
    if (!l || fs::path(o.path).filename().string().size() > fs::path(l->path).filename().string().size()) l = &o;
  }
  for (const auto& [option, o] : longest) {
    struct stat st;
    if (::lstat(o->path.c_str(), &st) == 0) {
      if (o->opened_in_place && S_ISREG(st.st_mode) && ::access(o->path.c_str(), W_OK) != 0)
        return option + ": '" + o->path + "' cannot be written (" + std::strerror(errno) +
               "): remove it (vitddp writes its scratch file there)";
      continue;
    }
    if (std::string e = creation_trial_problem(o->path); !e.empty()) return option + ": " + e;
  }
  return "";
}

}  // namespace vitddp
