#include "src/app/one_line.h"

namespace vitddp {

std::string one_line(const std::string& message) {
  std::string out;
  for (const char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      const char hex[] = "0123456789abcdef";
      out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
    } else
      out += ch;
  }
  return out;
}

}  // namespace vitddp
