// The registry of transport kinds (transports/transport.h): each kind's folder registers its
// factory once, at static initialization.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "transports/transport.h"

namespace chorus {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<const TransportFactory*> entries;
  bool sorted = true;
};

// Never destroyed: a progress or heartbeat thread may still look algorithms up while a program
// that did not destroy its communicators runs its static destructors in exit().
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

const std::vector<const TransportFactory*>& entries() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.sorted) {
    std::sort(r.entries.begin(), r.entries.end(),
              [](const TransportFactory* a, const TransportFactory* b) {
                return std::strcmp(a->name, b->name) < 0;
              });
    r.sorted = true;
  }
  return r.entries;
}

}  // namespace

TransportRegistration::TransportRegistration(const TransportFactory& f) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.entries.push_back(new TransportFactory(f));
  r.sorted = false;
}

std::span<const TransportFactory* const> allTransports() { return entries(); }

const TransportFactory* findTransport(std::string_view name) {
  for (const TransportFactory* f : entries())
    if (name == f->name) return f;
  return nullptr;
}

}  // namespace chorus
