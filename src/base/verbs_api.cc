#include "src/base/verbs_api.h"

#ifdef CHORUS_HAVE_IBVERBS

#include <dlfcn.h>

#include <atomic>
#include <mutex>

namespace chorus::ib {
namespace {

std::atomic<const VerbsApi*> testApi{nullptr};

template <typename Fn>
bool bind(void* lib, const char* name, Fn& out, std::string& missing) {
  out = reinterpret_cast<Fn>(::dlsym(lib, name));
  if (!out) missing += missing.empty() ? name : std::string(", ") + name;
  return out != nullptr;
}

struct Loaded {
  VerbsApi api{};
  bool ok = false;
  std::string why;
};

// Loaded once and never unloaded: verbs objects made through it may live until exit.
const Loaded& library() {
  static const Loaded* loaded = [] {
    auto* l = new Loaded();
    void* lib = ::dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = ::dlerror();
      l->why = std::string("dlopen(libibverbs.so.1): ") + (e ? e : "unknown error");
      return l;
    }
    VerbsApi& a = l->api;
    a.origin = "libibverbs.so.1";
    std::string missing;
    bind(lib, "ibv_fork_init", a.fork_init, missing);
    bind(lib, "ibv_get_device_list", a.get_device_list, missing);
    bind(lib, "ibv_free_device_list", a.free_device_list, missing);
    bind(lib, "ibv_get_device_name", a.get_device_name, missing);
    bind(lib, "ibv_open_device", a.open_device, missing);
    bind(lib, "ibv_close_device", a.close_device, missing);
    bind(lib, "ibv_query_device", a.query_device, missing);
    // The exported ibv_query_port (verbs.h wraps it in a macro) takes the plain port attribute.
    bind(lib, "ibv_query_port", a.query_port, missing);
    bind(lib, "ibv_query_gid", a.query_gid, missing);
    bind(lib, "ibv_alloc_pd", a.alloc_pd, missing);
    bind(lib, "ibv_dealloc_pd", a.dealloc_pd, missing);
    bind(lib, "ibv_reg_mr", a.reg_mr, missing);
    bind(lib, "ibv_dereg_mr", a.dereg_mr, missing);
    bind(lib, "ibv_create_comp_channel", a.create_comp_channel, missing);
    bind(lib, "ibv_destroy_comp_channel", a.destroy_comp_channel, missing);
    bind(lib, "ibv_create_cq", a.create_cq, missing);
    bind(lib, "ibv_destroy_cq", a.destroy_cq, missing);
    bind(lib, "ibv_get_cq_event", a.get_cq_event, missing);
    bind(lib, "ibv_ack_cq_events", a.ack_cq_events, missing);
    bind(lib, "ibv_create_qp", a.create_qp, missing);
    bind(lib, "ibv_modify_qp", a.modify_qp, missing);
    bind(lib, "ibv_destroy_qp", a.destroy_qp, missing);
    if (!missing.empty()) {
      l->why = "libibverbs.so.1 lacks " + missing;
      return l;
    }
    l->ok = true;
    return l;
  }();
  return *loaded;
}

}  // namespace

const VerbsApi* verbs(std::string* why) {
  if (const VerbsApi* t = testApi.load()) return t;
  const Loaded& l = library();
  if (!l.ok && why) *why = l.why;
  return l.ok ? &l.api : nullptr;
}

void setVerbsForTesting(const VerbsApi* api) { testApi.store(api); }

}  // namespace chorus::ib

#endif  // CHORUS_HAVE_IBVERBS
