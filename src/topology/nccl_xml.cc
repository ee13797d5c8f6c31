#include "src/topology/nccl_xml.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "src/base/logging.h"

namespace chorus::topo {
namespace {

// ---- Limits ------------------------------------------------------------------------------------
// Far above anything a real machine has (a few hundred elements, depth below 10), far below what
// would let a damaged or hostile file cost real time or memory.
constexpr size_t kMaxInputBytes = 64u << 20;
constexpr size_t kMaxElements = 1000000;
constexpr size_t kMaxDepth = 64;
constexpr size_t kMaxAttributes = 64;
constexpr size_t kMaxAttributeChars = 256;  // for names, vendors and other strings we keep
constexpr size_t kMaxAffinityDigits = 4096;  // hex digits: 16384 CPUs
constexpr size_t kMaxWarnings = 100;
constexpr int kMaxCpuElements = 256;
constexpr double kMaxNetMbps = 10e6;  // 10 Tb/s
constexpr double kMaxLinkGTs = 256;   // PCIe 7 runs at 128 GT/s
constexpr int kMaxLinkWidth = 32;
constexpr int kMaxNvlinkCount = 64;

// ---- The XML subset NCCL writes ----------------------------------------------------------------
// Elements, attributes (either quote), self-closing tags, comments, the XML declaration and other
// processing instructions (skipped), the five named entities and numeric character references.
// DOCTYPE and CDATA are refused: NCCL never writes them, and a DTD could expand entities.

// Names point into the input text, which outlives the parse.
struct XmlAttribute {
  std::string_view name;
  std::string value;
};

struct XmlElement {
  std::string_view name;
  int line = 0;
  int parent = -1;
  std::vector<XmlAttribute> attributes;
  std::vector<int> children;

  const std::string* attr(std::string_view n) const {
    for (const auto& a : attributes)
      if (a.name == n) return &a.value;
    return nullptr;
  }
};

// Up to `max` characters of `s`, with bytes outside printable ASCII as \xNN.
std::string printable(std::string_view s, size_t max = 40) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

// "<pci busid=0000:3b:00.0>": the element with the attribute that identifies it.
std::string describe(const XmlElement& e) {
  static constexpr std::pair<std::string_view, std::string_view> kKey[] = {
      {"pci", "busid"},  {"cpu", "numaid"},   {"gpu", "dev"},
      {"net", "name"},   {"nvlink", "target"}, {"system", "version"}};
  std::string out = "<";
  out += printable(e.name);
  for (const auto& [element, key] : kKey) {
    if (e.name != element) continue;
    if (const std::string* v = e.attr(key)) out += " " + std::string(key) + "=" + printable(*v);
  }
  return out + ">";
}

// "line 12: <pci busid=...>: "
std::string at(const XmlElement& e) {
  return "line " + std::to_string(e.line) + ": " + describe(e) + ": ";
}

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool isNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool isNameChar(char c) { return isNameStart(c) || (c >= '0' && c <= '9') || c == '-' || c == '.'; }

void appendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// Replaces entity and character references; false (with `error`) on an unknown or bad one.
bool decodeEntities(std::string_view raw, std::string* out, std::string* error) {
  out->clear();
  out->reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '&') {
      *out += raw[i];
      continue;
    }
    size_t semi = raw.find(';', i);
    if (semi == std::string_view::npos || semi - i > 32) {
      *error = "'&' that starts no entity (write &amp;)";
      return false;
    }
    std::string_view ref = raw.substr(i + 1, semi - i - 1);
    if (ref == "lt") {
      *out += '<';
    } else if (ref == "gt") {
      *out += '>';
    } else if (ref == "amp") {
      *out += '&';
    } else if (ref == "quot") {
      *out += '"';
    } else if (ref == "apos") {
      *out += '\'';
    } else if (ref.size() >= 2 && ref[0] == '#') {
      bool hexRef = ref[1] == 'x' || ref[1] == 'X';
      std::string_view digits = ref.substr(hexRef ? 2 : 1);
      uint32_t cp = 0;
      auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), cp, hexRef ? 16 : 10);
      if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() || cp == 0 ||
          cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        *error = "bad character reference '&" + printable(ref) + ";'";
        return false;
      }
      appendUtf8(cp, out);
    } else {
      *error = "unknown entity '&" + printable(ref) + ";'";
      return false;
    }
    i = semi;
  }
  return true;
}

class XmlParser {
 public:
  explicit XmlParser(std::string_view text) : s_(text) {}

  // Fills `els` in document order; els[0] is the root.
  Status parse(std::vector<XmlElement>* els) {
    if (s_.size() > kMaxInputBytes)
      return invalidArgument("line 1: the input has " + std::to_string(s_.size()) +
                             " bytes, more than the " + std::to_string(kMaxInputBytes >> 20) +
                             " MiB a topology file may have");
    if (s_.substr(0, 3) == "\xef\xbb\xbf") pos_ = 3;  // UTF-8 byte order mark
    std::vector<int> open;
    while (pos_ < s_.size()) {
      if (s_[pos_] != '<') {
        CHORUS_RETURN_IF_ERROR(text(open, *els));
      } else if (startsWith("<!--")) {
        CHORUS_RETURN_IF_ERROR(skipPast("-->", "comment"));
      } else if (startsWith("<?")) {
        CHORUS_RETURN_IF_ERROR(skipPast("?>", "processing instruction"));
      } else if (startsWith("<!")) {
        return invalidArgument(here() + "<!" + printable(word(pos_ + 2), 12) +
                               ": DOCTYPE, CDATA and other declarations are not supported");
      } else if (startsWith("</")) {
        CHORUS_RETURN_IF_ERROR(endTag(&open, *els));
      } else {
        CHORUS_RETURN_IF_ERROR(startTag(&open, els));
      }
    }
    if (!open.empty())
      return invalidArgument(at((*els)[static_cast<size_t>(open.back())]) +
                             "unclosed tag: the input ends before </" +
                             printable((*els)[static_cast<size_t>(open.back())].name) + ">");
    if (els->empty())
      return invalidArgument("line " + std::to_string(line_) + ": no <system> element (" +
                             (s_.empty() ? "the input is empty" : "the input has no element") + ")");
    return Status();
  }

 private:
  std::string here() const { return "line " + std::to_string(line_) + ": "; }
  bool startsWith(std::string_view p) const { return s_.substr(pos_, p.size()) == p; }
  std::string_view word(size_t from) const {
    size_t end = from;
    while (end < s_.size() && isNameChar(s_[end])) ++end;
    return s_.substr(from, end - from);
  }

  // Moves to `to`, counting the lines crossed.
  void advanceTo(size_t to) {
    const char* p = s_.data() + pos_;
    const char* end = s_.data() + to;
    while ((p = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p))))) {
      ++line_;
      ++p;
    }
    pos_ = to;
  }
  bool skipSpace() {
    size_t start = pos_;
    size_t i = pos_;
    while (i < s_.size() && isSpace(s_[i])) ++i;
    advanceTo(i);
    return i > start;
  }
  std::string_view name() {
    size_t start = pos_;
    if (pos_ < s_.size() && isNameStart(s_[pos_])) {
      while (pos_ < s_.size() && isNameChar(s_[pos_])) ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }

  Status skipPast(std::string_view terminator, const char* what) {
    size_t end = s_.find(terminator, pos_ + 2);
    if (end == std::string_view::npos)
      return invalidArgument(here() + "unterminated " + what + " (no '" + std::string(terminator) +
                             "' before the end of the input)");
    advanceTo(end + terminator.size());
    return Status();
  }

  // Character data: only whitespace belongs in a topology file.
  Status text(const std::vector<int>& open, const std::vector<XmlElement>& els) {
    size_t end = s_.find('<', pos_);
    if (end == std::string_view::npos) end = s_.size();
    size_t i = pos_;
    while (i < end && isSpace(s_[i])) ++i;
    advanceTo(i);
    if (i == end) return Status();
    std::string where = open.empty()
                            ? std::string(" outside the root element")
                            : " inside " + describe(els[static_cast<size_t>(open.back())]);
    std::string_view found = s_.substr(i, end - i);
    while (isSpace(found.back())) found.remove_suffix(1);
    return invalidArgument(here() + "unexpected text '" + printable(found, 20) + "'" + where);
  }

  Status startTag(std::vector<int>* open, std::vector<XmlElement>* els) {
    XmlElement e;
    e.line = line_;
    bool selfClosing = false;
    ++pos_;  // '<'
    e.name = name();
    if (e.name.empty())
      return invalidArgument(here() + "'<' is not followed by an element name (write &lt; in text)");
    for (;;) {
      bool spaced = skipSpace();
      if (pos_ >= s_.size())
        return invalidArgument(at(e) + "unterminated start tag (the input ends inside it)");
      char c = s_[pos_];
      if (c == '>') {
        ++pos_;
        break;
      }
      if (c == '/') {
        if (pos_ + 1 >= s_.size() || s_[pos_ + 1] != '>')
          return invalidArgument(at(e) + "expected '>' after '/'");
        pos_ += 2;
        selfClosing = true;
        break;
      }
      if (!isNameStart(c))
        return invalidArgument(at(e) + "unexpected character '" + printable(s_.substr(pos_, 1)) +
                               "' in the start tag");
      if (!spaced) return invalidArgument(at(e) + "attributes must be separated by spaces");
      XmlAttribute a;
      a.name = name();
      skipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '=')
        return invalidArgument(at(e) + "attribute " + printable(a.name) + " has no value");
      ++pos_;
      skipSpace();
      if (pos_ >= s_.size() || (s_[pos_] != '"' && s_[pos_] != '\''))
        return invalidArgument(at(e) + "the value of attribute " + printable(a.name) +
                               " must be quoted");
      char quote = s_[pos_];
      size_t close = s_.find(quote, pos_ + 1);
      if (close == std::string_view::npos)
        return invalidArgument(at(e) + "the value of attribute " + printable(a.name) +
                               " is not terminated");
      std::string_view raw = s_.substr(pos_ + 1, close - pos_ - 1);
      if (raw.find('<') != std::string_view::npos)
        return invalidArgument(at(e) + "'<' in the value of attribute " + printable(a.name) +
                               " (write &lt;)");
      std::string error;
      if (!decodeEntities(raw, &a.value, &error))
        return invalidArgument(at(e) + "attribute " + printable(a.name) + ": " + error);
      advanceTo(close + 1);
      if (e.attr(a.name))
        return invalidArgument(at(e) + "attribute " + printable(a.name) + " appears twice");
      if (e.attributes.size() >= kMaxAttributes)
        return invalidArgument(at(e) + "more than " + std::to_string(kMaxAttributes) +
                               " attributes");
      e.attributes.push_back(std::move(a));
    }
    e.parent = open->empty() ? -1 : open->back();
    if (open->empty() && !els->empty())
      return invalidArgument(at(e) + "a second root element (the first, " + describe((*els)[0]) +
                             ", is on line " + std::to_string((*els)[0].line) + ")");
    if (open->size() >= kMaxDepth)
      return invalidArgument(at(e) + "elements nested deeper than " + std::to_string(kMaxDepth));
    if (els->size() >= kMaxElements)
      return invalidArgument(at(e) + "more than " + std::to_string(kMaxElements) + " elements");
    int index = static_cast<int>(els->size());
    if (e.parent >= 0) (*els)[static_cast<size_t>(e.parent)].children.push_back(index);
    els->push_back(std::move(e));
    if (!selfClosing) open->push_back(index);
    return Status();
  }

  Status endTag(std::vector<int>* open, const std::vector<XmlElement>& els) {
    int line = line_;
    pos_ += 2;  // "</"
    std::string_view n = name();
    skipSpace();
    std::string tag = "</" + printable(n) + ">";
    if (n.empty() || pos_ >= s_.size() || s_[pos_] != '>')
      return invalidArgument("line " + std::to_string(line) + ": " + tag + ": malformed end tag");
    ++pos_;
    if (open->empty())
      return invalidArgument("line " + std::to_string(line) + ": " + tag +
                             " closes no open element");
    const XmlElement& top = els[static_cast<size_t>(open->back())];
    if (top.name != n)
      return invalidArgument("line " + std::to_string(line) + ": " + tag + " does not close " +
                             describe(top) + ", opened on line " + std::to_string(top.line));
    open->pop_back();
    return Status();
  }

  std::string_view s_;
  size_t pos_ = 0;
  int line_ = 1;
};

// ---- Attribute values ----------------------------------------------------------------------------

std::string_view trim(std::string_view s) {
  while (!s.empty() && isSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && isSpace(s.back())) s.remove_suffix(1);
  return s;
}

// An integer attribute in [lo, hi]; absent or empty leaves *out alone and *present false.
Status intAttr(const XmlElement& e, const char* key, int64_t lo, int64_t hi, int* out,
               bool* present = nullptr) {
  if (present) *present = false;
  const std::string* v = e.attr(key);
  if (!v || trim(*v).empty()) return Status();
  std::string_view s = trim(*v);
  int64_t x = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && p == s.data() + s.size() &&
                                               (x < lo || x > hi)))
    return invalidArgument(at(e) + key + "=\"" + printable(*v) + "\" is out of range (" +
                           std::to_string(lo) + " to " + std::to_string(hi) + ")");
  if (ec != std::errc() || p != s.data() + s.size())
    return invalidArgument(at(e) + key + "=\"" + printable(*v) + "\" is not an integer");
  *out = static_cast<int>(x);
  if (present) *present = true;
  return Status();
}

// A hex attribute ("0x10de" or "10de") at most `hi`.
Status hexAttr(const XmlElement& e, const char* key, uint32_t hi, uint32_t* out, bool* present) {
  *present = false;
  const std::string* v = e.attr(key);
  if (!v || trim(*v).empty()) return Status();
  std::string_view s = trim(*v);
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  uint64_t x = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x, 16);
  if (ec != std::errc() || p != s.data() + s.size() || x > hi) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%x", hi);
    return invalidArgument(at(e) + key + "=\"" + printable(*v) +
                           "\" is not a hex number up to " + buf);
  }
  *out = static_cast<uint32_t>(x);
  *present = true;
  return Status();
}

// A number attribute in [0, hi].
Status numberAttr(const XmlElement& e, const char* key, double hi, double* out) {
  const std::string* v = e.attr(key);
  if (!v || trim(*v).empty()) return Status();
  std::string_view s = trim(*v);
  double x = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec == std::errc::result_out_of_range ||
      (ec == std::errc() && p == s.data() + s.size() && !(x >= 0 && x <= hi)))
    return invalidArgument(at(e) + key + "=\"" + printable(*v) + "\" is out of range (0 to " +
                           printable(std::to_string(hi)) + ")");
  if (ec != std::errc() || p != s.data() + s.size())
    return invalidArgument(at(e) + key + "=\"" + printable(*v) + "\" is not a number");
  *out = x;
  return Status();
}

// A string we keep in the model: printable ASCII, bounded.
Status stringAttr(const XmlElement& e, const char* key, std::string* out, bool required = false) {
  const std::string* v = e.attr(key);
  if (!v || v->empty()) {
    if (required) return invalidArgument(at(e) + "missing " + key);
    return Status();
  }
  if (v->size() > kMaxAttributeChars)
    return invalidArgument(at(e) + key + " is longer than " + std::to_string(kMaxAttributeChars) +
                           " characters");
  for (char c : *v)
    if (c < 0x20 || c > 0x7e)
      return invalidArgument(at(e) + key + "=\"" + printable(*v) +
                             "\" has characters outside printable ASCII");
  *out = *v;
  return Status();
}

bool isHexDigits(std::string_view s, size_t minLen, size_t maxLen) {
  if (s.size() < minLen || s.size() > maxLen) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// "dddd:bb:dd.f" (or "bb:dd.f", domain 0) -> lower case, domain at least four digits.
bool normalizeBusId(std::string_view in, std::string* out) {
  std::string_view s = trim(in);
  size_t dot = s.rfind('.');
  if (dot == std::string_view::npos) return false;
  std::string_view func = s.substr(dot + 1);
  std::string_view rest = s.substr(0, dot);
  size_t c2 = rest.rfind(':');
  if (c2 == std::string_view::npos) return false;
  std::string_view dev = rest.substr(c2 + 1);
  rest = rest.substr(0, c2);
  size_t c1 = rest.rfind(':');
  std::string_view bus = c1 == std::string_view::npos ? rest : rest.substr(c1 + 1);
  std::string_view domain = c1 == std::string_view::npos ? std::string_view("0") : rest.substr(0, c1);
  if (!isHexDigits(domain, 1, 8) || !isHexDigits(bus, 1, 2) || !isHexDigits(dev, 1, 2) ||
      !isHexDigits(func, 1, 1))
    return false;
  auto value = [](std::string_view h) {
    unsigned v = 0;
    std::from_chars(h.data(), h.data() + h.size(), v, 16);
    return v;
  };
  unsigned d = value(dev), f = value(func);
  if (d > 0x1f || f > 7) return false;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", value(domain), value(bus), d, f);
  *out = buf;
  return true;
}

bool isPlaceholderBusId(std::string_view busId) { return busId.substr(0, 5) == "ffff:"; }

// What a PCI class code makes of a <pci> element without a <gpu> or <nic> child.
struct ClassInfo {
  NodeType type = NodeType::kOtherPci;
  NicKind nic = NicKind::kUnknown;
  bool known = false;
};
ClassInfo classify(uint32_t pciClass, uint32_t vendor) {
  ClassInfo c;
  c.known = true;
  switch (pciClass >> 8) {
    case 0x0300:  // VGA
    case 0x0302:  // 3D controller
    case 0x0380:  // other display controller (some accelerators)
      c.type = NodeType::kGpu;
      break;
    case 0x0200:
      c.type = NodeType::kNic;
      c.nic = NicKind::kEthernet;
      break;
    case 0x0207:
      c.type = NodeType::kNic;
      c.nic = NicKind::kInfiniBand;
      break;
    case 0x0280:  // other network controller
      c.type = NodeType::kNic;
      break;
    case 0x0604:  // PCI-to-PCI bridge: switch ports and root ports
      c.type = NodeType::kPciSwitch;
      break;
    case 0x0680:  // "other bridge": what NVSwitches report
      c.type = vendor == 0 || vendor == 0x10de ? NodeType::kNvSwitch : NodeType::kOtherPci;
      break;
    case 0x0600:  // host bridge
      c.type = NodeType::kOtherPci;
      break;
    default:
      c.known = false;
  }
  return c;
}

// An Ethernet-class function with a verbs device name carries RDMA: RoCE.
bool isVerbsName(std::string_view name) {
  for (std::string_view p : {"mlx4_", "mlx5_", "bnxt_re", "irdma", "qedr", "rxe", "erdma"})
    if (name.substr(0, p.size()) == p) return true;
  return false;
}

// ---- From elements to the System ---------------------------------------------------------------

class Importer {
 public:
  Importer(const std::vector<XmlElement>& els, std::vector<std::string>* warnings)
      : els_(els), warnings_(warnings) {}

  StatusOr<System> run() {
    CHORUS_RETURN_IF_ERROR(system(els_[0]));
    CHORUS_RETURN_IF_ERROR(resolveNvlinks());
    sys_.connectCpus();
    Status valid = sys_.validate();
    if (!valid.ok())
      return internalError("the imported topology is inconsistent: " + valid.message());
    if (dropped_ > 0 && warnings_)
      warnings_->push_back("... and " + std::to_string(dropped_) + " more warnings");
    CHORUS_LOG(INFO, TOPO) << "NCCL topology file: " << sys_.ofType(NodeType::kCpu).size()
                           << " CPUs, " << sys_.ofType(NodeType::kGpu).size() << " GPUs, "
                           << sys_.ofType(NodeType::kNic).size() << " NICs, "
                           << sys_.ofType(NodeType::kPciSwitch).size() << " PCI switches, "
                           << sys_.ofType(NodeType::kNvSwitch).size() << " NVSwitches, "
                           << sys_.links().size() << " links";
    return std::move(sys_);
  }

 private:
  struct PendingNvlink {
    int gpu;
    const XmlElement* el;
    int count;
    uint32_t tclass;
    bool hasTclass;
  };

  const XmlElement& child(int i) const { return els_[static_cast<size_t>(i)]; }

  void warn(const XmlElement& e, const std::string& what) {
    std::string msg = at(e) + what;
    if (!warnings_) {
      CHORUS_LOG(WARN, TOPO) << "NCCL topology file: " << msg;
    } else if (warnings_->size() < kMaxWarnings) {
      warnings_->push_back(std::move(msg));
    } else {
      ++dropped_;
    }
  }
  void ignored(const XmlElement& e, const XmlElement& parent) {
    warn(e, "not expected inside <" + printable(parent.name) + ">; ignored with its contents");
  }

  StatusOr<int> add(const XmlElement& e, Node n) {
    auto index = sys_.addNode(std::move(n));
    if (!index.ok()) return invalidArgument(at(e) + index.status().message());
    lineOf_.push_back(e.line);
    return index;
  }
  Status attach(const XmlElement& e, int node, int parent, double fallbackGBps) {
    Status s = sys_.attach(node, parent, fallbackGBps);
    if (!s.ok()) return invalidArgument(at(e) + s.message());
    return s;
  }
  std::string lineOfNode(int node) const {
    return std::to_string(lineOf_[static_cast<size_t>(node)]);
  }

  Status system(const XmlElement& e) {
    if (e.name != "system")
      return invalidArgument(at(e) + "the root element must be <system>");
    const std::string* version = e.attr("version");
    if (!version)
      warn(e, "no version attribute; read as version 1");
    else if (trim(*version) != "1")
      warn(e, "version \"" + printable(*version) + "\" is not 1; read as version 1");
    for (int c : e.children) {
      if (child(c).name == "cpu") {
        CHORUS_RETURN_IF_ERROR(cpu(child(c)));
      } else {
        ignored(child(c), e);
      }
    }
    if (sys_.nodes().empty()) warn(e, "no <cpu> element: the system is empty");
    return Status();
  }

  // "00000000,000fffff": 32-bit words, most significant first.
  Status affinity(const XmlElement& e, std::vector<int>* cpus) {
    const std::string* v = e.attr("affinity");
    if (!v) return Status();
    std::string_view mask = trim(*v);
    if (mask.substr(0, 2) == "0x" || mask.substr(0, 2) == "0X") mask.remove_prefix(2);
    std::string digits;
    for (char c : mask) {
      if (c == ',' || isSpace(c)) continue;
      if (!std::isxdigit(static_cast<unsigned char>(c)) || digits.size() >= kMaxAffinityDigits)
        return invalidArgument(at(e) + "affinity=\"" + printable(*v) +
                               "\" is not a hex CPU mask of at most " +
                               std::to_string(kMaxAffinityDigits * 4) + " CPUs");
      digits += c;
    }
    for (size_t i = 0; i < digits.size(); ++i) {
      char c = digits[digits.size() - 1 - i];
      int nibble = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
      for (int bit = 0; bit < 4; ++bit)
        if (nibble & (1 << bit)) cpus->push_back(static_cast<int>(i * 4) + bit);
    }
    return Status();
  }

  Status cpu(const XmlElement& e) {
    if (++cpuElements_ > kMaxCpuElements)
      return invalidArgument(at(e) + "more than " + std::to_string(kMaxCpuElements) +
                             " <cpu> elements");
    Node n;
    n.type = NodeType::kCpu;
    bool present = false;
    CHORUS_RETURN_IF_ERROR(intAttr(e, "numaid", 0, 65535, &n.numa, &present));
    if (!present) return invalidArgument(at(e) + "missing numaid");
    n.name = "cpu" + std::to_string(n.numa);
    int existing = sys_.find(n.name);
    if (existing >= 0)
      return invalidArgument(at(e) + "numaid " + std::to_string(n.numa) +
                             " is already used on line " + lineOfNode(existing));
    CHORUS_RETURN_IF_ERROR(affinity(e, &n.cpus));
    CHORUS_RETURN_IF_ERROR(stringAttr(e, "vendor", &n.cpuVendor));
    std::string arch, family, model;
    CHORUS_RETURN_IF_ERROR(stringAttr(e, "arch", &arch));
    CHORUS_RETURN_IF_ERROR(stringAttr(e, "familyid", &family));
    CHORUS_RETURN_IF_ERROR(stringAttr(e, "modelid", &model));
    // "x86_64 family 6 model 85"
    if (!family.empty()) family = "family " + family;
    if (!model.empty()) model = "model " + model;
    for (const std::string* part : {&arch, &family, &model}) {
      if (part->empty()) continue;
      if (!n.cpuModel.empty()) n.cpuModel += ' ';
      n.cpuModel += *part;
    }
    int numa = n.numa;
    CHORUS_ASSIGN_OR_RETURN(int index, add(e, std::move(n)));
    for (int c : e.children) {
      const XmlElement& x = child(c);
      if (x.name == "pci") {
        CHORUS_RETURN_IF_ERROR(pci(x, index, numa));
      } else if (x.name == "nic") {
        CHORUS_RETURN_IF_ERROR(nic(x, index, -1, numa));
      } else {
        ignored(x, e);
      }
    }
    return Status();
  }

  // Transfer rates as sysfs and NCCL write them: "16 GT/s", "32.0 GT/s PCIe", "8.0 GT/s", "",
  // "Unknown". Only a negative or absurd number is an error; anything else unreadable is unknown.
  Status linkSpeed(const XmlElement& e, int* gen) {
    *gen = 0;
    const std::string* v = e.attr("link_speed");
    if (!v) return Status();
    std::string_view s = trim(*v);
    if (s.empty() || s.substr(0, 7) == "Unknown") return Status();
    double gts = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), gts);
    if (ec == std::errc::result_out_of_range ||
        (ec == std::errc() && !(gts >= 0 && gts <= kMaxLinkGTs)))
      return invalidArgument(at(e) + "link_speed=\"" + printable(*v) + "\" is out of range (0 to " +
                             std::to_string(static_cast<int>(kMaxLinkGTs)) + " GT/s)");
    std::string_view unit = trim(s.substr(static_cast<size_t>(p - s.data())));
    if (ec != std::errc() || (!unit.empty() && unit.substr(0, 4) != "GT/s")) {
      warn(e, "link_speed=\"" + printable(*v) + "\" is not a transfer rate in GT/s; taken as unknown");
      return Status();
    }
    if (gts == 0) return Status();
    *gen = pcieGenOfGTs(gts);
    if (*gen == 0)
      warn(e, "link_speed=\"" + printable(*v) + "\" is no PCIe generation's rate; taken as unknown");
    return Status();
  }

  Status pci(const XmlElement& e, int parent, int numa) {
    const std::string* rawBusId = e.attr("busid");
    if (!rawBusId || trim(*rawBusId).empty()) return invalidArgument(at(e) + "missing busid");
    Node n;
    if (!normalizeBusId(*rawBusId, &n.busId))
      return invalidArgument(at(e) + "busid \"" + printable(*rawBusId) +
                             "\" is not a PCI address like 0000:3b:00.0");
    uint32_t cls = 0, vendor = 0, device = 0;
    bool hasClass = false, hasVendor = false, hasDevice = false;
    CHORUS_RETURN_IF_ERROR(hexAttr(e, "class", 0xffffff, &cls, &hasClass));
    CHORUS_RETURN_IF_ERROR(hexAttr(e, "vendor", 0xffff, &vendor, &hasVendor));
    CHORUS_RETURN_IF_ERROR(hexAttr(e, "device", 0xffff, &device, &hasDevice));
    n.pciClass = cls;
    n.vendor = static_cast<uint16_t>(vendor);
    n.device = static_cast<uint16_t>(device);
    CHORUS_RETURN_IF_ERROR(linkSpeed(e, &n.pcieGen));
    CHORUS_RETURN_IF_ERROR(intAttr(e, "link_width", 0, kMaxLinkWidth, &n.pcieWidth));
    n.numa = numa;

    // A <gpu> or <nic> child decides the type; otherwise the class does.
    const XmlElement* gpuEl = nullptr;
    const XmlElement* nicEl = nullptr;
    bool hasPciChildren = false;
    for (int c : e.children) {
      const XmlElement& x = child(c);
      const XmlElement** slot = x.name == "gpu" ? &gpuEl : x.name == "nic" ? &nicEl : nullptr;
      hasPciChildren = hasPciChildren || x.name == "pci";
      if (!slot) continue;
      if (*slot)
        return invalidArgument(at(x) + "a second <" + std::string(x.name) +
                               "> in the same <pci> (the first is on line " +
                               std::to_string((*slot)->line) + ")");
      *slot = &x;
    }
    if (gpuEl && nicEl) return invalidArgument(at(e) + "has both a <gpu> and a <nic>");
    ClassInfo info = classify(cls, vendor);
    char clsText[16];
    std::snprintf(clsText, sizeof clsText, "0x%06x", cls);
    if (gpuEl) {
      if (hasClass && info.type != NodeType::kGpu)
        warn(e, std::string("class ") + clsText + " is not a GPU class, but it holds a <gpu>");
      n.type = NodeType::kGpu;
    } else if (nicEl) {
      if (hasClass && info.type != NodeType::kNic)
        warn(e, std::string("class ") + clsText + " is not a network class, but it holds a <nic>");
      n.type = NodeType::kNic;
      n.nicKind = info.type == NodeType::kNic ? info.nic : NicKind::kUnknown;
    } else if (hasClass) {
      if (!info.known)
        warn(e, std::string("PCI class ") + clsText +
                    " is not a GPU, NIC, bridge or NVSwitch; kept as another PCI device");
      n.type = info.type;
      n.nicKind = info.nic;
    } else {
      n.type = hasPciChildren ? NodeType::kPciSwitch : NodeType::kOtherPci;
      warn(e, std::string("no class; taken as ") +
                  (hasPciChildren ? "a PCI bridge (it has <pci> children)" : "another PCI device"));
    }

    n.name = n.busId;
    int existing = sys_.findBusId(n.busId);
    if (existing >= 0) {
      if (!isPlaceholderBusId(n.busId))
        return invalidArgument(at(e) + "bus id " + n.busId + " is already used on line " +
                               lineOfNode(existing));
      // Placeholder ids are made up by the file's author; a repeated one names a new bridge.
      for (int k = 2; sys_.find(n.name) >= 0; ++k) n.name = n.busId + "#" + std::to_string(k);
      warn(e, "placeholder bus id " + n.busId + " is also used on line " + lineOfNode(existing) +
                  "; this one is kept as '" + n.name + "'");
      n.busId.clear();
    }
    CHORUS_ASSIGN_OR_RETURN(int index, add(e, std::move(n)));
    CHORUS_RETURN_IF_ERROR(attach(e, index, parent, defaults::unknownPcieGBps()));

    for (int c : e.children) {
      const XmlElement& x = child(c);
      if (x.name == "pci") {
        CHORUS_RETURN_IF_ERROR(pci(x, index, numa));
      } else if (x.name == "gpu") {
        CHORUS_RETURN_IF_ERROR(gpu(x, index));
      } else if (x.name == "nic") {
        CHORUS_RETURN_IF_ERROR(nic(x, index, index, numa));
      } else {
        ignored(x, e);
      }
    }
    return Status();
  }

  Status gpu(const XmlElement& e, int index) {
    Node& n = sys_.node(index);
    CHORUS_RETURN_IF_ERROR(intAttr(e, "dev", -1, 1 << 20, &n.cudaDevice));
    CHORUS_RETURN_IF_ERROR(intAttr(e, "sm", 0, 10000, &n.computeCapability));
    for (int c : e.children) {
      const XmlElement& x = child(c);
      if (x.name != "nvlink") {
        ignored(x, e);
        continue;
      }
      PendingNvlink p{index, &x, 1, 0, false};
      const std::string* target = x.attr("target");
      if (!target || trim(*target).empty()) return invalidArgument(at(x) + "missing target");
      CHORUS_RETURN_IF_ERROR(intAttr(x, "count", 0, kMaxNvlinkCount, &p.count));
      CHORUS_RETURN_IF_ERROR(hexAttr(x, "tclass", 0xffffff, &p.tclass, &p.hasTclass));
      nvlinks_.push_back(p);
    }
    return Status();
  }

  // <nic><net .../>...</nic>. Under a <pci> (pciNode >= 0) the first port is that PCI function;
  // further ports, and every port of a NIC known only by name, become nodes of their own.
  Status nic(const XmlElement& e, int parent, int pciNode, int numa) {
    bool first = true;
    for (int c : e.children) {
      const XmlElement& x = child(c);
      if (x.name != "net") {
        ignored(x, e);
        continue;
      }
      std::string name;
      double mbps = 0;
      int port = 0;
      CHORUS_RETURN_IF_ERROR(stringAttr(x, "name", &name, true));
      CHORUS_RETURN_IF_ERROR(numberAttr(x, "speed", kMaxNetMbps, &mbps));
      CHORUS_RETURN_IF_ERROR(intAttr(x, "port", 0, 65535, &port));
      if (!ports_.insert(name + '\0' + std::to_string(port)).second)
        return invalidArgument(at(x) + "port " + std::to_string(port) + " of " + name +
                               " is listed twice");
      if (pciNode >= 0 && first) {
        Node& n = sys_.node(pciNode);
        n.netDevice = name;
        n.port = port;
        n.speedGbps = mbps / 1000;
        if (n.nicKind == NicKind::kEthernet && isVerbsName(name)) n.nicKind = NicKind::kRoce;
      } else {
        Node n;
        n.type = NodeType::kNic;
        // A further port of a PCI function is "mlx5_0/2"; a NIC known only by name keeps it.
        n.name = pciNode >= 0 ? name + "/" + std::to_string(port) : name;
        if (sys_.find(n.name) >= 0) n.name = name + "/" + std::to_string(port);
        if (sys_.find(n.name) >= 0)
          return invalidArgument(at(x) + "the names " + name + " and " + n.name +
                                 " are both taken by other nodes");
        n.netDevice = name;
        n.port = port;
        n.speedGbps = mbps / 1000;
        n.numa = numa;
        double fallback = defaults::unknownPcieGBps();
        if (pciNode >= 0) {
          // Another port of the same function shares its PCIe link.
          n.nicKind = sys_.node(pciNode).nicKind;
          int up = sys_.node(pciNode).parent;
          for (int li : sys_.linksOf(pciNode)) {
            const Link& l = sys_.links()[static_cast<size_t>(li)];
            if (l.type == LinkType::kPcie && (l.a == up || l.b == up)) fallback = l.bandwidthGBps;
          }
        } else if (mbps > 0) {
          fallback = mbps / 8000;  // a NIC known only by name: its line rate
        }
        CHORUS_ASSIGN_OR_RETURN(int index, add(x, std::move(n)));
        CHORUS_RETURN_IF_ERROR(attach(x, index, pciNode >= 0 ? pciNode : parent, fallback));
      }
      first = false;
    }
    return Status();
  }

  Status resolveNvlinks() {
    struct Bundle {
      int a, b, count;
      int line;
    };
    std::vector<Bundle> bundles;
    std::unordered_map<uint64_t, size_t> bundleOf;  // unordered pair -> bundles index
    std::unordered_map<uint64_t, int> listed;       // (gpu, target) -> line
    auto key = [](int x, int y) { return static_cast<uint64_t>(x) << 32 | static_cast<uint32_t>(y); };
    for (const PendingNvlink& p : nvlinks_) {
      const XmlElement& e = *p.el;
      const Node& gpuNode = sys_.node(p.gpu);
      std::string target;
      if (!normalizeBusId(*e.attr("target"), &target))
        return invalidArgument(at(e) + "target \"" + printable(*e.attr("target")) +
                               "\" is not a PCI address like 0000:3b:00.0");
      if (target == gpuNode.busId)
        return invalidArgument(at(e) + "target " + target + " refers to the GPU itself");
      int t = sys_.findBusId(target);
      uint32_t base = p.hasTclass ? p.tclass >> 8 : 0;
      if (base == 0x0680) {
        if (t < 0) {
          Node sw;
          sw.type = NodeType::kNvSwitch;
          sw.name = target;
          sw.busId = target;
          sw.pciClass = p.tclass;
          CHORUS_ASSIGN_OR_RETURN(t, add(e, std::move(sw)));
        } else if (sys_.node(t).type != NodeType::kNvSwitch) {
          return invalidArgument(at(e) + "tclass says NVSwitch, but " + target + " is a " +
                                 std::string(nodeTypeName(sys_.node(t).type)) + " (line " +
                                 lineOfNode(t) + ")");
        }
      } else if (base == 0x0600) {
        t = sys_.cpuOf(p.gpu);  // NVLink to the CPU: the GPU's own, as NCCL reads it
        if (t < 0) return invalidArgument(at(e) + "an NVLink to the CPU, but the GPU has no CPU");
      } else {
        if (t < 0)
          return invalidArgument(at(e) + "target " + target +
                                 " is not a device of this file (an NVSwitch needs "
                                 "tclass=\"0x068000\")");
        NodeType type = sys_.node(t).type;
        bool gpuClass = base == 0x0300 || base == 0x0302 || base == 0x0380;
        if ((gpuClass && type != NodeType::kGpu) ||
            (type != NodeType::kGpu && type != NodeType::kNvSwitch && type != NodeType::kCpu))
          return invalidArgument(at(e) + "target " + target + " is a " +
                                 std::string(nodeTypeName(type)) + " (line " + lineOfNode(t) +
                                 "); NVLinks join GPUs, NVSwitches and CPUs");
      }
      if (t == p.gpu) return invalidArgument(at(e) + "target " + target + " refers to the GPU itself");
      auto [it, fresh] = listed.emplace(key(p.gpu, t), e.line);
      if (!fresh)
        return invalidArgument(at(e) + "a second <nvlink> from this GPU to " + sys_.node(t).name +
                               " (the first is on line " + std::to_string(it->second) + ")");
      if (p.count == 0) {
        warn(e, "count 0: no link");
        continue;
      }
      uint64_t pair = key(std::min(p.gpu, t), std::max(p.gpu, t));
      auto found = bundleOf.find(pair);
      if (found == bundleOf.end()) {
        bundleOf.emplace(pair, bundles.size());
        bundles.push_back({p.gpu, t, p.count, e.line});
        continue;
      }
      Bundle& b = bundles[found->second];
      if (b.count != p.count)
        warn(e, "count " + std::to_string(p.count) + " differs from the " +
                    std::to_string(b.count) + " on line " + std::to_string(b.line) +
                    " for the other direction; the larger is kept");
      b.count = std::max(b.count, p.count);
    }
    for (const Bundle& b : bundles) {
      int cc = 0;
      for (int end : {b.a, b.b}) {
        const Node& n = sys_.node(end);
        if (n.type == NodeType::kGpu && n.computeCapability > 0)
          cc = cc == 0 ? n.computeCapability : std::min(cc, n.computeCapability);
      }
      Link l;
      l.a = b.a;
      l.b = b.b;
      l.type = LinkType::kNvLink;
      l.count = b.count;
      l.bandwidthGBps = b.count * defaults::nvlinkGBps(cc);
      l.latencyUs = defaults::nvlinkLatencyUs();
      Status s = sys_.addLink(l);
      if (!s.ok()) return internalError("NVLink " + std::to_string(b.line) + ": " + s.message());
    }
    return Status();
  }

  const std::vector<XmlElement>& els_;
  std::vector<std::string>* warnings_;
  size_t dropped_ = 0;
  System sys_;
  std::vector<int> lineOf_;  // node index -> line of the element that made it
  std::vector<PendingNvlink> nvlinks_;
  std::unordered_set<std::string> ports_;  // "name\0port" of every <net>
  int cpuElements_ = 0;
};

}  // namespace

StatusOr<System> importNcclXml(std::string_view text, std::vector<std::string>* warnings) {
  std::vector<XmlElement> els;
  CHORUS_RETURN_IF_ERROR(XmlParser(text).parse(&els));
  return Importer(els, warnings).run();
}

StatusOr<System> importNcclXmlFile(const std::string& path, std::vector<std::string>* warnings) {
  CHORUS_ASSIGN_OR_RETURN(std::string text, readTopologyFile(path));
  auto s = importNcclXml(text, warnings);
  if (!s.ok()) return s.status().withContext(path);
  return s;
}

}  // namespace chorus::topo
