#include "src/topology/nccl_xml.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include <pugixml.hpp>

#include "src/base/logging.h"
#include "src/base/strings.h"
#include "src/topology/bus_id.h"

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

// ---- Reading the XML ---------------------------------------------------------------------------
// pugixml parses. It is more lenient than a topology file should be, so the walk below refuses
// what it lets through and the old reader refused: text inside or outside elements, a second
// root, DOCTYPE and CDATA (NCCL never writes them), duplicate attributes, and in attribute
// values '<', unknown entities, a bare '&' and bad character references (pugixml keeps those
// verbatim or drops them). It also applies the limits above. The importer then reads the
// elements in document order, each with the line it starts on.

// XML's attribute-value normalisation (tabs and line breaks read as spaces) and line-break
// normalisation stay on; comments, processing instructions and the declaration are skipped;
// DOCTYPE and CDATA are kept as nodes to be refused; a fragment keeps text outside the root.
constexpr unsigned kParseFlags = pugi::parse_default | pugi::parse_doctype | pugi::parse_fragment;

// Names and values point into the reader's buffer, which outlives the import.
struct XmlAttribute {
  std::string_view name;
  std::string_view value;
};

struct XmlElement {
  std::string_view name;
  int line = 0;
  std::vector<XmlAttribute> attributes;
  std::vector<int> children;

  const std::string_view* attr(std::string_view n) const {
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
      {"pci", "busid"}, {"cpu", "numaid"},    {"gpu", "dev"},
      {"net", "name"},  {"nvlink", "target"}, {"system", "version"}};
  std::string out = "<";
  out += printable(e.name);
  for (const auto& [element, key] : kKey) {
    if (e.name != element) continue;
    const std::string_view* v = e.attr(key);
    if (!v) continue;
    // Appended piece by piece: g++ 12 warns (-Wrestrict, wrongly) on the chain of operator+.
    out += ' ';
    out += key;
    out += '=';
    out += printable(*v);
  }
  return out + ">";
}

// "line 12: <pci busid=...>: "
std::string at(const XmlElement& e) {
  return "line " + std::to_string(e.line) + ": " + describe(e) + ": ";
}

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Why `raw`, an attribute value as written, is not one: '<', or a '&' that starts no entity or
// character reference XML knows. "" when it is fine.
std::string badReference(std::string_view raw) {
  if (raw.find('<') != std::string_view::npos) return "'<' in the value (write &lt;)";
  for (size_t amp = raw.find('&'); amp != std::string_view::npos; amp = raw.find('&', amp + 1)) {
    size_t semi = raw.find(';', amp);
    if (semi == std::string_view::npos || semi - amp > 32)
      return "'&' that starts no entity (write &amp;)";
    std::string_view ref = raw.substr(amp + 1, semi - amp - 1);
    if (ref == "lt" || ref == "gt" || ref == "amp" || ref == "quot" || ref == "apos") continue;
    if (ref.size() < 2 || ref[0] != '#') return "unknown entity '&" + printable(ref) + ";'";
    bool hexRef = ref[1] == 'x' || ref[1] == 'X';
    std::string_view digits = ref.substr(hexRef ? 2 : 1);
    uint32_t cp = 0;
    auto [p, ec] =
        std::from_chars(digits.data(), digits.data() + digits.size(), cp, hexRef ? 16 : 10);
    if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() || cp == 0 ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return "bad character reference '&" + printable(ref) + ";'";
  }
  return "";
}

class XmlReader {
 public:
  // Parses in place: a copy of `text` that the elements point into. The copy ends with a NUL
  // of its own: parsing a fragment in place, pugixml writes a terminator over the last character
  // of text that runs to the end of the buffer.
  explicit XmlReader(std::string_view text) : text_(text), buffer_(std::string(text) + '\0') {
    for (size_t i = text.find('\n'); i != std::string_view::npos; i = text.find('\n', i + 1))
      newlines_.push_back(i);
  }
  XmlReader(const XmlReader&) = delete;
  XmlReader& operator=(const XmlReader&) = delete;

  // Fills `els` in document order; els[0] is the root.
  Status read(std::vector<XmlElement>* els) {
    if (text_.size() > kMaxInputBytes)
      return invalidArgument("line 1: the input has " + std::to_string(text_.size()) +
                             " bytes, more than the " + std::to_string(kMaxInputBytes >> 20) +
                             " MiB a topology file may have");
    // pugixml would stop at a NUL as if the input ended there.
    if (size_t nul = text_.find('\0'); nul != std::string_view::npos)
      return invalidArgument(here(nul) + "a NUL byte: a topology file is text");
    CHORUS_RETURN_IF_ERROR(countStartTags());
    pugi::xml_parse_result parsed =
        doc_.load_buffer_inplace(buffer_.data(), buffer_.size(), kParseFlags, pugi::encoding_utf8);
    if (!parsed) return syntaxError(parsed);

    pugi::xml_node root;
    for (pugi::xml_node n : doc_.children()) {
      switch (n.type()) {
        case pugi::node_element:
          if (root)
            return invalidArgument(
                here(n) + describe(element(n)) + ": a second root element (the first, " +
                describe(element(root)) + ", is on line " + std::to_string(lineOf(root)) + ")");
          root = n;
          break;
        case pugi::node_pcdata:
          return unexpectedText(n, " outside the root element");
        default:
          CHORUS_RETURN_IF_ERROR(refuseDeclaration(n));
      }
    }
    if (!root)
      return invalidArgument(
          "line " + std::to_string(newlines_.size() + 1) + ": no <system> element (" +
          (text_.empty() ? "the input is empty" : "the input has no element") + ")");
    return walk(root, -1, 1, els);
  }

 private:
  int lineAt(size_t offset) const {
    return 1 + static_cast<int>(std::lower_bound(newlines_.begin(), newlines_.end(), offset) -
                                newlines_.begin());
  }
  // pugixml's offset of a node: its name, or the first character of its text.
  int lineOf(pugi::xml_node n) const { return lineAt(static_cast<size_t>(n.offset_debug())); }
  std::string here(size_t offset) const { return "line " + std::to_string(lineAt(offset)) + ": "; }
  std::string here(pugi::xml_node n) const { return "line " + std::to_string(lineOf(n)) + ": "; }

  XmlElement element(pugi::xml_node n) const {
    XmlElement e;
    e.name = n.name();
    e.line = lineOf(n);
    for (pugi::xml_attribute a : n.attributes()) e.attributes.push_back({a.name(), a.value()});
    return e;
  }

  // The bound on elements, checked before pugixml builds them: at most one per '<' that opens
  // no end tag, comment, declaration or processing instruction.
  Status countStartTags() const {
    size_t starts = 0;
    for (size_t i = text_.find('<'); i != std::string_view::npos; i = text_.find('<', i + 1)) {
      char next = i + 1 < text_.size() ? text_[i + 1] : '\0';
      if (next == '/' || next == '!' || next == '?') continue;
      if (++starts <= kMaxElements) continue;
      size_t end = i + 1;
      while (end < text_.size() && !isSpace(text_[end]) && text_[end] != '>' && text_[end] != '/')
        ++end;
      return invalidArgument(here(i) + "<" + printable(text_.substr(i + 1, end - i - 1)) +
                             ">: more than " + std::to_string(kMaxElements) + " elements");
    }
    return Status();
  }

  Status unexpectedText(pugi::xml_node n, const std::string& where) const {
    // The node starts after the previous tag; the line is that of its first visible character.
    size_t from = static_cast<size_t>(n.offset_debug());
    while (from < text_.size() && isSpace(text_[from])) ++from;
    std::string_view found = n.value();
    while (!found.empty() && isSpace(found.front())) found.remove_prefix(1);
    while (!found.empty() && isSpace(found.back())) found.remove_suffix(1);
    return invalidArgument(here(from) + "unexpected text '" + printable(found, 20) + "'" + where);
  }

  Status refuseDeclaration(pugi::xml_node n) const {
    const char* what = n.type() == pugi::node_doctype ? "<!DOCTYPE" : "<![CDATA[";
    return invalidArgument(here(n) + what +
                           ": DOCTYPE, CDATA and other declarations are not supported");
  }

  Status walk(pugi::xml_node n, int parent, size_t depth, std::vector<XmlElement>* els) const {
    XmlElement e = element(n);
    if (depth > kMaxDepth)
      return invalidArgument(at(e) + "elements nested deeper than " + std::to_string(kMaxDepth));
    if (e.attributes.size() > kMaxAttributes)
      return invalidArgument(at(e) + "more than " + std::to_string(kMaxAttributes) + " attributes");
    for (size_t i = 0; i < e.attributes.size(); ++i) {
      const XmlAttribute& a = e.attributes[i];
      for (size_t j = 0; j < i; ++j)
        if (e.attributes[j].name == a.name)
          return invalidArgument(at(e) + "attribute " + printable(a.name) + " appears twice");
      if (std::string why = badReference(rawValue(a.value)); !why.empty())
        return invalidArgument(at(e) + "attribute " + printable(a.name) + ": " + why);
    }
    int index = static_cast<int>(els->size());
    if (parent >= 0) (*els)[static_cast<size_t>(parent)].children.push_back(index);
    els->push_back(std::move(e));
    for (pugi::xml_node c : n.children()) {
      switch (c.type()) {
        case pugi::node_element:
          CHORUS_RETURN_IF_ERROR(walk(c, index, depth + 1, els));
          break;
        case pugi::node_pcdata:
          return unexpectedText(c, " inside " + describe((*els)[static_cast<size_t>(index)]));
        default:
          return refuseDeclaration(c);
      }
    }
    return Status();
  }

  // An attribute value as the file writes it. Parsing in place, pugixml decodes a value where it
  // stands: the decoded text starts where the written one does, which runs to the closing quote.
  std::string_view rawValue(std::string_view decoded) const {
    const char* begin = buffer_.data();
    if (decoded.data() <= begin || decoded.data() >= begin + text_.size()) return {};
    size_t from = static_cast<size_t>(decoded.data() - begin);
    char quote = text_[from - 1];
    size_t to = text_.find(quote, from);
    if ((quote != '"' && quote != '\'') || to == std::string_view::npos) return {};
    return text_.substr(from, to - from);
  }

  // The element being read when pugixml stopped: the last one in document order.
  pugi::xml_node lastElement() const {
    pugi::xml_node n = doc_;
    while (n.last_child()) n = n.last_child();
    while (n && n.type() != pugi::node_element) n = n.parent();
    return n;
  }

  // "</name>" for the end tag at `lt` (its "</").
  std::string endTagAt(size_t lt) const {
    size_t end = lt + 2;
    while (end < text_.size() && !isSpace(text_[end]) && text_[end] != '>' && text_[end] != '<')
      ++end;
    return "</" + printable(text_.substr(lt + 2, end - lt - 2)) + ">";
  }

  // pugixml's offsets say where it stopped, which for a construct the input ends inside is near
  // the end, not where the construct starts: messages name the line of its opening characters,
  // and whether its closing ones ever come.
  Status syntaxError(const pugi::xml_parse_result& r) const {
    size_t offset = std::min(static_cast<size_t>(std::max<ptrdiff_t>(r.offset, 0)), text_.size());
    size_t opener = std::string_view::npos;
    bool closed = true;
    auto construct = [&](std::string_view open, std::string_view close) {
      opener = text_.rfind(open, offset);
      if (opener == std::string_view::npos) opener = offset;
      closed = text_.find(close, opener + open.size()) != std::string_view::npos;
      return here(opener);
    };
    // A start tag pugixml stopped inside may hold half-read attributes: only its name is shown.
    pugi::xml_node last = lastElement();
    std::string tag = last ? "<" + printable(last.name()) + ">" : "<?>";
    switch (r.status) {
      case pugi::status_unrecognized_tag:
        return invalidArgument(here(offset) +
                               "'<' is not followed by an element name (write &lt; in text)");
      case pugi::status_bad_pi: {
        std::string where = construct("<?", "?>");
        return invalidArgument(where + (closed
                                            ? "malformed processing instruction or XML declaration"
                                            : "unterminated processing instruction (no '?>' "
                                              "before the end of the input)"));
      }
      case pugi::status_bad_comment: {
        std::string where = construct("<!--", "-->");
        return invalidArgument(where + (closed ? "malformed comment ('--' inside it?)"
                                               : "unterminated comment (no '-->' before the end of "
                                                 "the input)"));
      }
      case pugi::status_bad_cdata:
      case pugi::status_bad_doctype: {
        std::string where = construct("<!", ">");
        return invalidArgument(where + "malformed <!" + printable(text_.substr(opener + 2, 8)) +
                               ": DOCTYPE, CDATA and other declarations are not supported");
      }
      case pugi::status_bad_start_element:
      case pugi::status_bad_attribute: {
        if (!last) break;
        size_t start = static_cast<size_t>(last.offset_debug());
        std::string where = here(start) + tag + ": ";
        if (text_.find('>', start) == std::string_view::npos)
          return invalidArgument(where + "unterminated start tag (the input ends inside it)");
        return invalidArgument(where + "malformed start tag at '" +
                               printable(text_.substr(offset, 12)) +
                               "' (attributes are name=\"value\" or name='value', separated by "
                               "spaces)");
      }
      case pugi::status_bad_end_element: {
        std::string where = construct("</", ">");
        return invalidArgument(where + endTagAt(opener) + ": malformed end tag" +
                               (closed ? "" : " (the input ends inside it)"));
      }
      case pugi::status_end_element_mismatch: {
        std::string lastOpened = last ? "the last start tag before it is " +
                                            describe(element(last)) + " on line " +
                                            std::to_string(lineOf(last))
                                      : "no element was opened";
        if (offset >= 2 && text_.substr(offset - 2, 2) == "</")
          return invalidArgument(here(offset) + endTagAt(offset - 2) +
                                 " does not close the element open there (" + lastOpened + ")");
        return invalidArgument(here(text_.size()) +
                               "unclosed tag: the input ends with an element still open (" +
                               lastOpened + ")");
      }
      default:
        break;
    }
    return invalidArgument(here(offset) + "malformed XML: " + r.description());
  }

  std::string_view text_;
  std::string buffer_;
  std::vector<size_t> newlines_;  // offsets of '\n' in text_
  pugi::xml_document doc_;
};

// ---- Attribute values --------------------------------------------------------------------------

// An integer attribute in [lo, hi]; absent or empty leaves *out alone and *present false.
Status intAttr(const XmlElement& e, const char* key, int64_t lo, int64_t hi, int* out,
               bool* present = nullptr) {
  if (present) *present = false;
  const std::string_view* v = e.attr(key);
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
  const std::string_view* v = e.attr(key);
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
  const std::string_view* v = e.attr(key);
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
  const std::string_view* v = e.attr(key);
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
  *out = std::string(*v);
  return Status();
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
    const std::string_view* version = e.attr("version");
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
    const std::string_view* v = e.attr("affinity");
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
    const std::string_view* v = e.attr("link_speed");
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
    const std::string_view* rawBusId = e.attr("busid");
    if (!rawBusId || trim(*rawBusId).empty()) return invalidArgument(at(e) + "missing busid");
    Node n;
    n.busId = normalizeBusId(*rawBusId);
    if (n.busId.empty())
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
      const std::string_view* target = x.attr("target");
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
      std::string target = normalizeBusId(*e.attr("target"));
      if (target.empty())
        return invalidArgument(at(e) + "target \"" + printable(*e.attr("target")) +
                               "\" is not a PCI address like 0000:3b:00.0");
      if (target == gpuNode.busId) {
        // Azure's NC A100 v4 file gives each GPU one <nvlink> naming the GPU itself (count 12):
        // the GPU has NVLinks, but the file does not say where they go. A link with one end
        // carries nothing between devices and no path could use it, so it is left out rather
        // than guessed at; NCCL users run with this file, so it must load.
        warn(e, "target " + target + " is the GPU itself; ignored (no link to another device)");
        continue;
      }
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
  XmlReader reader(text);  // the elements point into it
  std::vector<XmlElement> els;
  CHORUS_RETURN_IF_ERROR(reader.read(&els));
  return Importer(els, warnings).run();
}

StatusOr<System> importNcclXmlFile(const std::string& path, std::vector<std::string>* warnings) {
  CHORUS_ASSIGN_OR_RETURN(std::string text, readTopologyFile(path));
  auto s = importNcclXml(text, warnings);
  if (!s.ok()) return s.status().withContext(path);
  return s;
}

}  // namespace chorus::topo
