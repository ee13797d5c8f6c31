// Small string helpers shared by every layer.
#pragma once

#include <string>
#include <string_view>

namespace chorus {

// Appends `item` to a `sep`-separated list (no separator before the first item). Written with
// append: g++ 12 warns falsely on "literal" + std::string at -O3 (PR105651).
inline void appendItem(std::string& list, std::string_view item, std::string_view sep = ", ") {
  if (!list.empty()) list.append(sep);
  list.append(item);
}

}  // namespace chorus
