// Small string helpers: trimming text read from interface specs (socket_util.cc), sysfs and
// topology files (src/topology/); building lists for messages. Header-only; like the rest of
// src/base it includes nothing above it.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace chorus {

// `s` without leading and trailing white space (std::isspace in the C locale: space, \t, \n,
// \v, \f, \r). The result views the same characters as `s`.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Appends `item` to a `sep`-separated list (no separator before the first item). Written with
// append: g++ 12 warns falsely on "literal" + std::string at -O3 (PR105651).
inline void appendItem(std::string& list, std::string_view item, std::string_view sep = ", ") {
  if (!list.empty()) list.append(sep);
  list.append(item);
}

}  // namespace chorus
