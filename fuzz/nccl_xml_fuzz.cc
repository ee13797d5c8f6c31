// libFuzzer target: the NCCL topology XML importer, and everything a successful import feeds.
//
// For any input, importNcclXml must return either an InvalidArgument whose message names a line,
// or a System that passes validate(), survives a JSON round trip unchanged (and whose JSON is
// stable), and answers path() queries consistently. Anything else aborts, so libFuzzer keeps the
// input as a crash artifact. Run with fuzz/run.sh; the corpus is replayed in ctest
// (fuzz_replay.nccl_xml).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "src/topology/json.h"
#include "src/topology/nccl_xml.h"
#include "src/topology/system.h"
#include "fuzz/fuzz_target.h"

namespace {

[[noreturn]] void xmlFail(const char* what, const std::string& detail) {
  chorus::fuzz::fail("nccl_xml_fuzz", what, detail);
}

void checkPaths(const chorus::topo::System& s) {
  using chorus::topo::PathType;
  // The first nodes hold the CPUs and the first devices; enough to cover every path kind
  // without making each input cost O(n^2).
  int n = static_cast<int>(std::min<size_t>(s.nodes().size(), 16));
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      chorus::topo::Path p = s.path(a, b);
      std::string which = s.node(a).name + " -> " + s.node(b).name;
      if ((a == b) != (p.type == PathType::kLoc)) xmlFail("LOC iff the same node", which);
      if (p.type != s.path(b, a).type) xmlFail("path type is not symmetric", which);
      if (p.type == PathType::kDis) {
        if (!p.nodes.empty()) xmlFail("a DIS path lists nodes", which);
        continue;
      }
      if (p.nodes.empty() || p.nodes.front() != a || p.nodes.back() != b)
        xmlFail("a path does not run from one end to the other", which);
      if (!(p.bandwidthGBps >= 0) || !(p.latencyUs >= 0))
        xmlFail("negative or NaN bandwidth or latency", which);
      if (p.type == PathType::kNet) xmlFail("NET inside one system", which);
    }
  }
}

}  // namespace

int chorus::fuzz::ncclXmlOne(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> warnings;
  auto imported = chorus::topo::importNcclXml(text, &warnings);
  if (!imported.ok()) {
    const chorus::Status& st = imported.status();
    if (st.code() != chorus::Code::kInvalidArgument)
      xmlFail("not an InvalidArgument", st.toString());
    if (st.message().rfind("line ", 0) != 0) xmlFail("an error that names no line", st.toString());
    return 0;
  }
  const chorus::topo::System& s = *imported;
  if (warnings.size() > 101) xmlFail("warnings are not capped", std::to_string(warnings.size()));
  for (const std::string& w : warnings)
    if (w.rfind("line ", 0) != 0 && w.rfind("... and ", 0) != 0)
      xmlFail("a warning names no line", w);
  chorus::Status valid = s.validate();
  if (!valid.ok()) xmlFail("an imported system fails validate()", valid.toString());

  std::string json = chorus::topo::toJson(s);
  auto back = chorus::topo::fromJson(json);
  if (!back.ok()) xmlFail("toJson() output does not load", back.status().toString() + "\n" + json);
  if (!(*back == s)) xmlFail("the JSON round trip changed the system", json);
  if (chorus::topo::toJson(*back) != json) xmlFail("toJson() is not stable", json);

  checkPaths(s);
  return 0;
}

CHORUS_FUZZ_TARGET(ncclXmlOne)
