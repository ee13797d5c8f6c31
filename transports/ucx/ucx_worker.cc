#include "transports/ucx/ucx_worker.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "src/base/logging.h"

namespace chorus::ucx {
namespace {

std::atomic<int> gContexts{0}, gWorkers{0}, gEndpoints{0};

struct Shared {
  std::mutex mu;
  std::weak_ptr<Context> context;
  pid_t owner = 0;  // the process that made `context`
};

Shared& shared() {
  static Shared* s = new Shared();  // never destroyed: transports may outlive static objects
  return *s;
}

// UCX's transports that move data by RDMA (InfiniBand, RoCE), as ucp_context_print_info names
// its resources ("rc_verbs/mlx5_0:1").
bool namesRdmaTransport(const std::string& text) {
  for (const char* tl : {"rc_verbs/", "rc_mlx5/", "dc_mlx5/", "ud_verbs/", "ud_mlx5/"})
    if (text.find(tl) != std::string::npos) return true;
  return false;
}

// UCX_TLS limits UCX to tcp (and loopback "self"): no shared memory, no RDMA.
bool tcpOnly(const char* tls) {
  if (!tls || tls[0] == '^') return false;
  bool tcp = false;
  for (const std::string& item : tlsItems(tls)) {
    if (item == "tcp") {
      tcp = true;
    } else if (item != "self") {
      return false;
    }
  }
  return tcp;
}

}  // namespace

// Over tcp alone, UCX's rendezvous protocol (a request, a reply, then the data, each needing
// the other side's progress) cost 2-5x the time of eager sends for the 0.5-4 MiB messages
// chorus's algorithms send when the ranks share their cores (docs/performance.md, UCX section):
// eager messages stream as tcp lets them. So, unless the user chose, messages below 8 MiB go
// eager there; larger ones keep the rendezvous, which bounds what an early message can make
// the receiver buffer.
constexpr const char* kTcpRndvThresh = "8M";

std::vector<std::string> tlsItems(const char* tls) {
  std::vector<std::string> items;
  if (!tls || !*tls) return items;
  const std::string list(tls);
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    items.push_back(list.substr(pos, end - pos));
    pos = end + 1;
  }
  return items;
}

uint64_t commBits(uint64_t commId) {
  uint64_t x = commId;
  x ^= x >> 32;
  x ^= x >> 16;
  return (x & ((uint64_t{1} << kCommBits) - 1)) << (kMessageTagBits + kRankBits);
}

std::string statusText(ucs_status_t status) {
  return std::string(ucs_status_string(status)) + " (UCS status " +
         std::to_string(static_cast<int>(status)) + ")";
}

StatusOr<std::shared_ptr<Context>> Context::get() {
  Shared& s = shared();
  std::lock_guard<std::mutex> lock(s.mu);
  const pid_t me = ::getpid();
  if (s.owner == me) {
    if (auto c = s.context.lock()) return c;
  } else if (s.owner != 0 && s.context.lock()) {
    // Forked from a process with a context: that one belongs to the parent; it is left alone
    // (cleaning it up here would tear down the parent's state), and a fresh one is made.
    CHORUS_LOG(INFO, NET) << "ucx: process " << me << " forked from one with a UCX context; "
                          << "making its own";
  }
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return systemError("ucx: ucp_config_read: " + statusText(st));
  if (tcpOnly(std::getenv("UCX_TLS")) && !std::getenv("UCX_RNDV_THRESH")) {
    st = ucp_config_modify(config, "RNDV_THRESH", kTcpRndvThresh);
    if (st != UCS_OK) {
      ucp_config_release(config);
      return systemError("ucx: ucp_config_modify(RNDV_THRESH): " + statusText(st));
    }
    CHORUS_LOG(INFO, NET) << "ucx: UCX_TLS is tcp only: rendezvous from " << kTcpRndvThresh
                          << " bytes (set UCX_RNDV_THRESH to choose)";
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  // Workers of different communicators may be driven from different threads at once.
  params.mt_workers_shared = 1;
  ucp_context_h h = nullptr;
  st = ucp_init(&params, config, &h);
  ucp_config_release(config);
  if (st != UCS_OK)
    return systemError("ucx: ucp_init (features TAG, RMA, WAKEUP): " + statusText(st) +
                       "; check UCX_TLS / UCX_NET_DEVICES");
  std::shared_ptr<Context> c(new Context(h));
  ++gContexts;
  s.context = c;
  s.owner = me;
  return c;
}

Context::~Context() {
  ucp_cleanup(ctx_);
  --gContexts;
}

StatusOr<std::shared_ptr<Worker>> Worker::create(int rank) {
  CHORUS_ASSIGN_OR_RETURN(std::shared_ptr<Context> ctx, Context::get());
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS;
  // Serialised by Worker::mutex().
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  params.events = UCP_WAKEUP_TAG_SEND | UCP_WAKEUP_TAG_RECV;
  ucp_worker_h w = nullptr;
  ucs_status_t st = ucp_worker_create(ctx->handle(), &params, &w);
  const std::string me = "ucx: rank " + std::to_string(rank);
  if (st != UCS_OK) return systemError(me + ": ucp_worker_create: " + statusText(st));
  int efd = -1;
  st = ucp_worker_get_efd(w, &efd);
  if (st != UCS_OK) {
    ucp_worker_destroy(w);
    return systemError(me + ": ucp_worker_get_efd: " + statusText(st));
  }
  ++gWorkers;
  return std::shared_ptr<Worker>(new Worker(std::move(ctx), w, efd));
}

Worker::~Worker() {
  // A peer's CLOSE that arrived after this rank's connection to it was gone waits in the
  // unexpected queue: take such small leftovers before the worker goes (UCX would warn).
  constexpr size_t kLeftoverMaxBytes = 4096;
  for (int left = 1024; left > 0; --left) {
    ucp_tag_recv_info_t info{};
    if (!ucp_tag_probe_nb(worker_, 0, 0, 0, &info) || info.length > kLeftoverMaxBytes) break;
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, 0, 0, 1, &info);
    auto sink = std::make_unique<uint8_t[]>(info.length + 1);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = ucp_dt_make_contig(1);
    ucs_status_ptr_t req = ucp_tag_msg_recv_nbx(worker_, sink.get(), info.length, msg, &p);
    if (!UCS_PTR_IS_PTR(req)) continue;
    for (int i = 0; i < 10000 && ucp_request_check_status(req) == UCS_INPROGRESS; ++i)
      ucp_worker_progress(worker_);
    const bool unfinished = ucp_request_check_status(req) == UCS_INPROGRESS;
    ucp_request_free(req);
    if (unfinished) {
      sink.release();  // UCX may still write into it
      break;
    }
  }
  ucp_worker_destroy(worker_);
  --gWorkers;
}

LiveCounts liveCounts() { return {gContexts.load(), gWorkers.load(), gEndpoints.load()}; }

void countEndpoint(int delta) { gEndpoints += delta; }

bool hasRdmaDevice() {
  static const bool found = [] {
    auto ctx = Context::get();
    if (!ctx.ok()) return false;
    char* text = nullptr;
    size_t len = 0;
    FILE* f = ::open_memstream(&text, &len);
    if (!f) return false;
    ucp_context_print_info((*ctx)->handle(), f);
    std::fclose(f);
    const bool rdma = namesRdmaTransport(std::string(text, len));
    std::free(text);
    CHORUS_LOG(INFO, NET) << "ucx: " << (rdma ? "an" : "no") << " RDMA-class device";
    return rdma;
  }();
  return found;
}

}  // namespace chorus::ucx
