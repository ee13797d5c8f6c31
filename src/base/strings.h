// Small string helpers shared by the code that reads text: interface specs (socket_util.cc),
// sysfs files and topology files (src/topology/). Header-only, like the rest of src/base it
// includes nothing above it.
#pragma once

#include <cctype>
#include <string_view>

namespace chorus {

// `s` without leading and trailing white space (std::isspace in the C locale: space, \t, \n,
// \v, \f, \r). The result views the same characters as `s`.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace chorus
