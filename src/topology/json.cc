#include "src/topology/json.h"

#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

namespace chorus::topo {
namespace {

using Json = nlohmann::ordered_json;

// A CPU list cannot name more CPUs than this; it keeps "0-2000000000" from exhausting memory.
constexpr size_t kMaxCpusPerNode = 1u << 20;

std::string hex(uint64_t v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*" PRIx64, digits, v);
  return buf;
}

// Runs of three or more consecutive ids become "a-b"; the rest are listed. Order is kept.
std::string cpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j] != std::numeric_limits<int>::max() &&
           cpus[j + 1] == cpus[j] + 1)
      ++j;
    if (!out.empty()) out += ',';
    if (j - i >= 2) {
      out += std::to_string(cpus[i]) + "-" + std::to_string(cpus[j]);
      i = j + 1;
    } else {
      out += std::to_string(cpus[i]);
      ++i;
    }
  }
  return out;
}

bool parseInt(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && *out >= 0;
}

Status parseCpuList(std::string_view s, const std::string& where, std::vector<int>* out) {
  out->clear();
  if (s.empty()) return Status();
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string_view item = s.substr(start, comma == std::string_view::npos ? s.npos : comma - start);
    size_t dash = item.find('-');
    int lo, hi;
    bool ok = dash == std::string_view::npos
                  ? parseInt(item, &lo) && ((hi = lo), true)
                  : parseInt(item.substr(0, dash), &lo) && parseInt(item.substr(dash + 1), &hi);
    if (!ok || hi < lo)
      return invalidArgument(where + ": '" + std::string(item) +
                             "' is not a CPU id or an ascending range 'a-b'");
    if (static_cast<size_t>(hi - lo) + 1 > kMaxCpusPerNode - out->size())
      return invalidArgument(where + ": more than " + std::to_string(kMaxCpusPerNode) + " CPUs");
    for (int c = lo;; ++c) {
      out->push_back(c);
      if (c == hi) break;
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return Status();
}

Json nodeJson(const System& s, const Node& n) {
  const Node d;  // the defaults
  Json j;
  j["name"] = n.name;
  j["type"] = nodeTypeName(n.type);
  if (n.parent >= 0 && static_cast<size_t>(n.parent) < s.nodes().size())
    j["parent"] = s.node(n.parent).name;
  if (n.busId != d.busId) j["busId"] = n.busId;
  if (n.pciClass != d.pciClass) j["pciClass"] = hex(n.pciClass, 6);
  if (n.vendor != d.vendor) j["vendor"] = hex(n.vendor, 4);
  if (n.device != d.device) j["device"] = hex(n.device, 4);
  if (n.pcieGen != d.pcieGen) j["pcieGen"] = n.pcieGen;
  if (n.pcieWidth != d.pcieWidth) j["pcieWidth"] = n.pcieWidth;
  if (n.numa != d.numa) j["numa"] = n.numa;
  if (n.cpus != d.cpus) j["cpus"] = cpuList(n.cpus);
  if (n.cores != d.cores) j["cores"] = n.cores;
  if (n.l2Bytes != d.l2Bytes) j["l2Bytes"] = n.l2Bytes;
  if (n.l3Bytes != d.l3Bytes) j["l3Bytes"] = n.l3Bytes;
  if (n.cpuVendor != d.cpuVendor) j["cpuVendor"] = n.cpuVendor;
  if (n.cpuModel != d.cpuModel) j["cpuModel"] = n.cpuModel;
  if (n.cudaDevice != d.cudaDevice) j["cudaDevice"] = n.cudaDevice;
  if (n.computeCapability != d.computeCapability) j["computeCapability"] = n.computeCapability;
  if (n.netDevice != d.netDevice) j["netDevice"] = n.netDevice;
  if (n.port != d.port) j["port"] = n.port;
  if (n.nicKind != d.nicKind) j["nicKind"] = nicKindName(n.nicKind);
  if (n.speedGbps != d.speedGbps) j["speedGbps"] = n.speedGbps;
  if (n.linkUp != d.linkUp) j["linkUp"] = n.linkUp;
  return j;
}

Json linkJson(const System& s, const Link& l) {
  auto nameOf = [&s](int i) {
    return i >= 0 && static_cast<size_t>(i) < s.nodes().size() ? s.node(i).name : std::string();
  };
  Json j;
  j["a"] = nameOf(l.a);
  j["b"] = nameOf(l.b);
  j["type"] = linkTypeName(l.type);
  j["bandwidthGBps"] = l.bandwidthGBps;
  j["latencyUs"] = l.latencyUs;
  if (l.count != 1) j["count"] = l.count;
  return j;
}

// Never throws: a string that is not UTF-8 (validate() refuses those) is written with U+FFFD.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Typed access to one JSON object's fields, with errors that name the element.
class Fields {
 public:
  Fields(const Json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  Status onlyKnown(std::initializer_list<std::string_view> known) const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      bool found = false;
      for (std::string_view k : known) found = found || k == it.key();
      if (!found) return invalidArgument(where_ + ": unknown field '" + it.key() + "'");
    }
    return Status();
  }

  bool has(const char* key) const { return obj_.contains(key); }
  std::string at(const char* key) const { return where_ + "." + key; }

  Status string(const char* key, std::string* out, bool required = false) const {
    const Json* v = get(key);
    if (!v) return required ? missing(key) : Status();
    if (!v->is_string()) return expected(key, "a string");
    *out = v->get<std::string>();
    return Status();
  }

  template <typename T>
  Status integer(const char* key, T* out, int64_t lo, uint64_t hi) const {
    const Json* v = get(key);
    if (!v) return Status();
    if (!v->is_number_integer()) return expected(key, "an integer");
    bool inRange;
    if (v->is_number_unsigned()) {
      uint64_t u = v->get<uint64_t>();
      inRange = u <= hi;
      if (inRange) *out = static_cast<T>(u);
    } else {
      int64_t i = v->get<int64_t>();
      inRange = i >= lo && (i < 0 || static_cast<uint64_t>(i) <= hi);
      if (inRange) *out = static_cast<T>(i);
    }
    if (!inRange)
      return invalidArgument(at(key) + ": " + v->dump() + " is out of range [" +
                             std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return Status();
  }

  // A hex string "0x..." or a non-negative integer, at most `hi`.
  template <typename T>
  Status hexNumber(const char* key, T* out, uint64_t hi, bool required = false) const {
    const Json* v = get(key);
    if (!v) return required ? missing(key) : Status();
    if (v->is_number_integer()) return integer(key, out, 0, hi);
    if (!v->is_string()) return expected(key, "a hex string like \"0x1f\" or an integer");
    const std::string& s = v->get_ref<const std::string&>();
    uint64_t u = 0;
    bool ok = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
    if (ok) {
      auto [p, ec] = std::from_chars(s.data() + 2, s.data() + s.size(), u, 16);
      ok = ec == std::errc() && p == s.data() + s.size();
    }
    if (!ok) return expected(key, "a hex string like \"0x1f\" or an integer");
    if (u > hi) return invalidArgument(at(key) + ": " + s + " is larger than " + hex(hi, 1));
    *out = static_cast<T>(u);
    return Status();
  }

  Status number(const char* key, double* out, bool required = false) const {
    const Json* v = get(key);
    if (!v) return required ? missing(key) : Status();
    if (!v->is_number()) return expected(key, "a number");
    *out = v->get<double>();
    return Status();
  }

  Status boolean(const char* key, bool* out) const {
    const Json* v = get(key);
    if (!v) return Status();
    if (!v->is_boolean()) return expected(key, "true or false");
    *out = v->get<bool>();
    return Status();
  }

 private:
  const Json* get(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  Status missing(const char* key) const { return invalidArgument(at(key) + ": missing"); }
  Status expected(const char* key, const char* what) const {
    return invalidArgument(at(key) + ": expected " + what);
  }

  const Json& obj_;
  std::string where_;
};

constexpr int64_t kIntMin = std::numeric_limits<int>::min();
constexpr uint64_t kIntMax = std::numeric_limits<int>::max();

Status readNode(const Fields& f, Node* n, std::string* parent) {
  CHORUS_RETURN_IF_ERROR(f.onlyKnown(
      {"name", "type", "parent", "busId", "pciClass", "vendor", "device", "pcieGen", "pcieWidth",
       "numa", "cpus", "cores", "l2Bytes", "l3Bytes", "cpuVendor", "cpuModel", "cudaDevice",
       "computeCapability", "netDevice", "port", "nicKind", "speedGbps", "linkUp"}));
  CHORUS_RETURN_IF_ERROR(f.string("name", &n->name, true));
  std::string text;
  CHORUS_RETURN_IF_ERROR(f.string("type", &text, true));
  auto type = parseNodeType(text);
  if (!type.ok()) return type.status().withContext(f.at("type"));
  n->type = *type;
  CHORUS_RETURN_IF_ERROR(f.string("parent", parent));
  CHORUS_RETURN_IF_ERROR(f.string("busId", &n->busId));
  CHORUS_RETURN_IF_ERROR(f.hexNumber("pciClass", &n->pciClass, 0xffffff));
  CHORUS_RETURN_IF_ERROR(f.hexNumber("vendor", &n->vendor, 0xffff));
  CHORUS_RETURN_IF_ERROR(f.hexNumber("device", &n->device, 0xffff));
  CHORUS_RETURN_IF_ERROR(f.integer("pcieGen", &n->pcieGen, kIntMin, kIntMax));
  CHORUS_RETURN_IF_ERROR(f.integer("pcieWidth", &n->pcieWidth, kIntMin, kIntMax));
  CHORUS_RETURN_IF_ERROR(f.integer("numa", &n->numa, kIntMin, kIntMax));
  if (f.has("cpus")) {
    CHORUS_RETURN_IF_ERROR(f.string("cpus", &text));
    CHORUS_RETURN_IF_ERROR(parseCpuList(text, f.at("cpus"), &n->cpus));
  }
  CHORUS_RETURN_IF_ERROR(f.integer("cores", &n->cores, kIntMin, kIntMax));
  CHORUS_RETURN_IF_ERROR(f.integer("l2Bytes", &n->l2Bytes, 0, UINT64_MAX));
  CHORUS_RETURN_IF_ERROR(f.integer("l3Bytes", &n->l3Bytes, 0, UINT64_MAX));
  CHORUS_RETURN_IF_ERROR(f.string("cpuVendor", &n->cpuVendor));
  CHORUS_RETURN_IF_ERROR(f.string("cpuModel", &n->cpuModel));
  CHORUS_RETURN_IF_ERROR(f.integer("cudaDevice", &n->cudaDevice, kIntMin, kIntMax));
  CHORUS_RETURN_IF_ERROR(f.integer("computeCapability", &n->computeCapability, kIntMin, kIntMax));
  CHORUS_RETURN_IF_ERROR(f.string("netDevice", &n->netDevice));
  CHORUS_RETURN_IF_ERROR(f.integer("port", &n->port, kIntMin, kIntMax));
  if (f.has("nicKind")) {
    CHORUS_RETURN_IF_ERROR(f.string("nicKind", &text));
    auto kind = parseNicKind(text);
    if (!kind.ok()) return kind.status().withContext(f.at("nicKind"));
    n->nicKind = *kind;
  }
  CHORUS_RETURN_IF_ERROR(f.number("speedGbps", &n->speedGbps));
  CHORUS_RETURN_IF_ERROR(f.boolean("linkUp", &n->linkUp));
  return Status();
}

Status readLink(const Fields& f, const System& s, Link* l) {
  CHORUS_RETURN_IF_ERROR(
      f.onlyKnown({"a", "b", "type", "bandwidthGBps", "latencyUs", "count"}));
  std::string a, b, type;
  CHORUS_RETURN_IF_ERROR(f.string("a", &a, true));
  CHORUS_RETURN_IF_ERROR(f.string("b", &b, true));
  l->a = s.find(a);
  if (l->a < 0) return invalidArgument(f.at("a") + ": no node named '" + a + "'");
  l->b = s.find(b);
  if (l->b < 0) return invalidArgument(f.at("b") + ": no node named '" + b + "'");
  CHORUS_RETURN_IF_ERROR(f.string("type", &type, true));
  auto t = parseLinkType(type);
  if (!t.ok()) return t.status().withContext(f.at("type"));
  l->type = *t;
  CHORUS_RETURN_IF_ERROR(f.number("bandwidthGBps", &l->bandwidthGBps, true));
  CHORUS_RETURN_IF_ERROR(f.number("latencyUs", &l->latencyUs, true));
  CHORUS_RETURN_IF_ERROR(f.integer("count", &l->count, kIntMin, kIntMax));
  return Status();
}

StatusOr<System> build(const Json& doc) {
  if (!doc.is_object()) return invalidArgument("expected a JSON object at the top level");
  Fields top(doc, "topology");
  CHORUS_RETURN_IF_ERROR(top.onlyKnown({"format", "version", "comment", "host", "nodes", "links"}));
  std::string format;
  CHORUS_RETURN_IF_ERROR(top.string("format", &format, true));
  if (format != kJsonFormat)
    return invalidArgument("format: '" + format + "' is not '" + std::string(kJsonFormat) + "'");
  int version = 0;
  if (!top.has("version")) return invalidArgument("version: missing");
  CHORUS_RETURN_IF_ERROR(top.integer("version", &version, kIntMin, kIntMax));
  if (version != kJsonVersion)
    return invalidArgument("version: " + std::to_string(version) + " is not supported (this chorus reads version " +
                           std::to_string(kJsonVersion) + ")");
  std::string comment;
  CHORUS_RETURN_IF_ERROR(top.string("comment", &comment));

  System s;
  if (doc.contains("host")) {
    const Json& host = *doc.find("host");
    if (!host.is_object()) return invalidArgument("host: expected an object");
    Fields h(host, "host");
    CHORUS_RETURN_IF_ERROR(h.onlyKnown({"name", "id"}));
    CHORUS_RETURN_IF_ERROR(h.string("name", &s.hostName));
    CHORUS_RETURN_IF_ERROR(h.hexNumber("id", &s.hostId, UINT64_MAX));
  }

  static const Json kEmpty = Json::array();
  const Json& nodes = doc.contains("nodes") ? *doc.find("nodes") : kEmpty;
  const Json& links = doc.contains("links") ? *doc.find("links") : kEmpty;
  if (!nodes.is_array()) return invalidArgument("nodes: expected an array");
  if (!links.is_array()) return invalidArgument("links: expected an array");

  std::vector<std::string> parents(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::string where = "nodes[" + std::to_string(i) + "]";
    if (!nodes[i].is_object()) return invalidArgument(where + ": expected an object");
    Node n;
    CHORUS_RETURN_IF_ERROR(readNode(Fields(nodes[i], where), &n, &parents[i]));
    auto index = s.addNode(std::move(n));
    if (!index.ok()) return index.status().withContext(where);
  }
  for (size_t i = 0; i < parents.size(); ++i) {
    if (parents[i].empty()) continue;
    int p = s.find(parents[i]);
    if (p < 0)
      return invalidArgument("nodes[" + std::to_string(i) + "].parent: no node named '" +
                             parents[i] + "'");
    s.node(static_cast<int>(i)).parent = p;
  }
  for (size_t i = 0; i < links.size(); ++i) {
    std::string where = "links[" + std::to_string(i) + "]";
    if (!links[i].is_object()) return invalidArgument(where + ": expected an object");
    Link l;
    CHORUS_RETURN_IF_ERROR(readLink(Fields(links[i], where), s, &l));
    Status added = s.addLink(l);
    if (!added.ok()) return added.withContext(where);
  }
  CHORUS_RETURN_IF_ERROR(s.validate());
  return s;
}

}  // namespace

std::string toJson(const System& system) {
  Json host;
  host["name"] = system.hostName;
  host["id"] = hex(system.hostId, 16);
  std::string out = "{\n";
  out += "  \"format\": " + dump(Json(std::string(kJsonFormat))) + ",\n";
  out += "  \"version\": " + std::to_string(kJsonVersion) + ",\n";
  out += "  \"host\": " + dump(host) + ",\n";
  auto list = [&out](const char* key, const std::vector<std::string>& items, bool last) {
    out += std::string("  \"") + key + "\": [";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ",\n    " : "\n    ") + items[i];
    out += items.empty() ? "]" : "\n  ]";
    out += last ? "\n" : ",\n";
  };
  std::vector<std::string> items;
  for (const Node& n : system.nodes()) items.push_back(dump(nodeJson(system, n)));
  list("nodes", items, false);
  items.clear();
  for (const Link& l : system.links()) items.push_back(dump(linkJson(system, l)));
  list("links", items, true);
  out += "}\n";
  return out;
}

StatusOr<System> fromJson(std::string_view text) {
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann reports "... parse error at line L, column C: ..."; this is the only place
    // an exception can come from, and it stops here.
    return invalidArgument(std::string("not valid JSON: ") + e.what());
  }
  auto s = build(doc);
  if (!s.ok()) return s.status().withContext(std::string(kJsonFormat) + " JSON");
  return s;
}

StatusOr<System> loadJsonFile(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(std::string text, readTopologyFile(path));
  auto s = fromJson(text);
  if (!s.ok()) return s.status().withContext(path);
  return s;
}

Status saveJsonFile(const System& system, const std::string& path) {
  std::string text = toJson(system);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return errnoStatus("fopen", path);
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  int err = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) return errnoStatus("fwrite", path, err);
  return Status();
}

}  // namespace chorus::topo
