#include "src/h5_util.h"

#include <ctime>
#include <vector>

namespace vitddp {
namespace h5 {

std::string error_text() {
  std::vector<std::string> entries;
  auto walk = [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->push_back(std::string(e->func_name ? e->func_name : "?") + ": " +
                                                           (e->desc ? e->desc : "?"));
    return 0;
  };
  if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk, &entries) < 0 || entries.empty())
    return "no HDF5 error description";
  if (entries.size() == 1) return entries.front();
  return entries.front() + " (" + entries.back() + ")";
}

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietErrors::~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

Handle vlen_string_type(const std::string& object) {
  Handle t(H5_CHECK(H5Tcopy(H5T_C_S1), object), H5Tclose);
  H5_CHECK(H5Tset_size(t.get(), H5T_VARIABLE), object);
  H5_CHECK(H5Tset_cset(t.get(), H5T_CSET_UTF8), object);
  return t;
}

Handle intermediate_groups_lcpl(const std::string& object) {
  Handle lcpl(H5_CHECK(H5Pcreate(H5P_LINK_CREATE), object), H5Pclose);
  H5_CHECK(H5Pset_create_intermediate_group(lcpl.get(), 1), object);
  return lcpl;
}

bool link_exists(hid_t loc, const std::string& name) {
  size_t pos = 0;
  while (true) {
    const size_t slash = name.find('/', pos);
    const std::string prefix = name.substr(0, slash);
    if (!prefix.empty() && H5_CHECK(H5Lexists(loc, prefix.c_str(), H5P_DEFAULT), name) <= 0) return false;
    if (slash == std::string::npos) return true;
    pos = slash + 1;
  }
}

std::string utc_now_iso8601() {
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace h5
}  // namespace vitddp
