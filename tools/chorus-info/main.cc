// chorus-info: what this chorus installation is and how it can be configured.
//
// Prints the library version, the features it was built with, its transports (and whether each
// can be used here), its algorithms, and every CHORUS_* environment variable from the library's
// registry with its default and doc, marking those set in the current environment. Variables that look like ours but are not in the registry are listed
// too: they are almost always typos that chorus silently ignores.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "chorus/chorus.h"

extern char** environ;

namespace {

struct EnvEntry {
  std::string name;
  std::string defaultValue;
  std::string doc;
};

std::vector<EnvEntry> registry() {
  std::vector<EnvEntry> out;
  for (int i = 0;; ++i) {
    const char* name = nullptr;
    const char* def = nullptr;
    const char* doc = nullptr;
    if (chorusGetEnvInfo(i, &name, &def, &doc) != chorusSuccess) break;
    out.push_back({name ? name : "", def ? def : "", doc ? doc : ""});
  }
  return out;
}

std::string versionText(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

}  // namespace

int main(int argc, char** argv) {
  bool setOnly = false;
  CLI::App app{"chorus-info: version, build features and CHORUS_* environment variables."};
  app.set_version_flag("--version", "chorus-info " + versionText(CHORUS_VERSION_CODE));
  app.add_flag("--set", setOnly, "list only the variables set in the current environment");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; usage errors exit 2, as is customary for command-line tools.
    return app.exit(e) == 0 ? 0 : 2;
  }

  int version = 0;
  if (chorusGetVersion(&version) != chorusSuccess) {
    std::fprintf(stderr, "chorus-info: chorusGetVersion failed: %s\n", chorusGetLastError(nullptr));
    return EXIT_FAILURE;
  }
  std::printf("chorus %s (library; built against headers %s)\n", versionText(version).c_str(),
              versionText(CHORUS_VERSION_CODE).c_str());
  const char* features = chorusGetBuildFeatures();
  std::printf("features: %s\n", features != nullptr && *features ? features : "(none)");

  std::printf("\ntransports (CHORUS_TRANSPORT):\n");
  for (int i = 0;; ++i) {
    const char* name = nullptr;
    const char* doc = nullptr;
    const char* unavailable = nullptr;
    if (chorusGetTransportInfo(i, &name, &doc, &unavailable) != chorusSuccess) break;
    std::printf("  %-8s %s%s%s\n", name, doc, unavailable ? "\n           not usable here: " : "",
                unavailable ? unavailable : "");
  }
  std::printf("\nalgorithms (CHORUS_ALGO):\n");
  for (int i = 0;; ++i) {
    const char* coll = nullptr;
    const char* name = nullptr;
    const char* doc = nullptr;
    if (chorusGetAlgorithmInfo(i, &coll, &name, &doc) != chorusSuccess) break;
    const std::string qualified = std::string(coll) + ":" + name;
    std::printf("  %-30s %s\n", qualified.c_str(), doc);
  }

  std::vector<EnvEntry> vars = registry();
  std::set<std::string> known;
  for (const EnvEntry& v : vars) known.insert(v.name);

  // One entry per variable: its effective value and where that value comes from, then the doc.
  std::printf("\nenvironment variables (%zu):\n", vars.size());
  int setCount = 0;
  for (const EnvEntry& v : vars) {
    const char* value = std::getenv(v.name.c_str());
    if (value != nullptr) ++setCount;
    if (setOnly && value == nullptr) continue;
    std::string line = "  " + v.name;
    std::string def = v.defaultValue.empty() ? "no default" : "default " + v.defaultValue;
    if (value != nullptr) {
      line += " = " + std::string(value) + "   [set; " + def + "]";
    } else if (!v.defaultValue.empty()) {
      line += " = " + v.defaultValue + "   [default]";
    } else {
      line += "   [unset, no default]";
    }
    std::printf("%s\n      %s\n", line.c_str(), v.doc.c_str());
  }
  std::printf("\n%d of them set in this environment.\n", setCount);

  std::vector<std::string> unknown;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    if (name.rfind("CHORUS_", 0) == 0 && known.count(name) == 0) unknown.push_back(name);
  }
  if (!unknown.empty()) {
    std::printf("\nset but not recognized by this library (typo?):\n");
    for (const std::string& n : unknown) std::printf("  %s\n", n.c_str());
  }
  return EXIT_SUCCESS;
}
