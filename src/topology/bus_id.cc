#include "src/topology/bus_id.h"

#include <charconv>
#include <cstdio>

#include "src/base/strings.h"

namespace chorus::topo {
namespace {

// 1 to `maxDigits` hex digits whose value is at most `max`.
bool hexField(std::string_view s, size_t maxDigits, unsigned long max, unsigned long* out) {
  if (s.empty() || s.size() > maxDigits) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && end == s.data() + s.size() && *out <= max;
}

}  // namespace

std::string normalizeBusId(std::string_view in) {
  std::string_view s = trim(in);
  size_t dot = s.rfind('.');
  if (dot == std::string_view::npos) return "";
  std::string_view head = s.substr(0, dot), fn = s.substr(dot + 1);
  size_t c2 = head.rfind(':');
  if (c2 == std::string_view::npos) return "";
  std::string_view dev = head.substr(c2 + 1), rest = head.substr(0, c2);
  size_t c1 = rest.rfind(':');
  std::string_view bus = c1 == std::string_view::npos ? rest : rest.substr(c1 + 1);
  std::string_view domain =
      c1 == std::string_view::npos ? std::string_view("0") : rest.substr(0, c1);
  unsigned long d = 0, b = 0, v = 0, f = 0;
  if (!hexField(domain, 8, 0xffffffff, &d) || !hexField(bus, 2, 0xff, &b) ||
      !hexField(dev, 2, 0x1f, &v) || !hexField(fn, 1, 7, &f))
    return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04lx:%02lx:%02lx.%lx", d, b, v, f);
  return buf;
}

}  // namespace chorus::topo
