#include "src/base/config.h"

#include <cstdlib>
#include <cstring>

#include "src/base/logging.h"

namespace chorus::config {
namespace {

// Every CHORUS_* variable chorus reads. Keep sorted by subsystem; doc strings are user-facing.
constexpr EnvVar kVars[] = {
    // Bootstrap
    {"CHORUS_ROOT", "", "host:port of the rendezvous store (rank 0 serves it) for chorusCommInitFromEnv"},
    {"CHORUS_RANK", "", "this process's rank, with CHORUS_ROOT and CHORUS_NRANKS"},
    {"CHORUS_NRANKS", "", "number of ranks in the job, with CHORUS_ROOT and CHORUS_RANK"},
    {"CHORUS_LOCAL_RANK", "", "rank among the processes on this host (set by chorus-run)"},
    {"CHORUS_LOCAL_NRANKS", "", "number of ranks on this host (set by chorus-run)"},
    {"CHORUS_JOB_SECRET", "", "32 hex digits: the job secret for env bootstrap (default: derived from the root address and the launcher's job ids, which anyone who can read them can compute; set it for jobs across untrusted networks)"},
    {"CHORUS_HOST_ID", "", "overrides the host identity (boot id + hostname); ranks with equal ids are on one host"},
    // Transports
    {"CHORUS_TRANSPORT", "", "comma-separated transports allowed, e.g. tcp (default: all built)"},
    {"CHORUS_SHM_CMA", "1", "1: the shm transport reads large messages straight from the sender's memory (process_vm_readv) and enables the direct algorithms; 0: copy everything through shared slots"},
    {"CHORUS_SHM_CMA_MIN", "64K", "messages from this size up go by cross-memory attach instead of through shared slots"},
    {"CHORUS_SHM_STAGING", "", "slot size of the host staging segment (all ranks on one host): all-reduces up to this size run one-shot through it; 0 disables it (default: derived from the detected L2, 32K when unknown; chorus-topo --tune shows it)"},
    {"CHORUS_SHM_STAGING_ROUND", "", "two-shot area of the host staging segment, per rank and half: all-reduces above CHORUS_SHM_STAGING run two-shot through it in rounds of this many bytes; 0: over cross-memory attach instead (default: derived from the detected L2 and L3, 256K when unknown)"},
    {"CHORUS_SOCKET_IFNAME", "", "network interfaces for TCP: prefixes, comma-separated; ^ excludes, = exact (default: the interface that reaches the root, else the first non-loopback)"},
    {"CHORUS_TCP_CONGESTION", "cubic", "congestion control of the TCP transport's sockets (TCP_CONGESTION); system keeps the host's net.ipv4.tcp_congestion_control. Not the host's default because BBR's pacing made a one-shot all-reduce over loopback 2x slower after bulk transfers; a default the kernel lacks falls back to the system's, a name set here that it refuses is an error"},
    {"CHORUS_SOCKET_FAMILY", "", "AF_INET or AF_INET6 to force the address family of TCP sockets"},
    {"CHORUS_UCX_ONESIDED", "auto", "whether UCX connections offer one-sided reads (ucp_get through ucp_mem_map/ucp_rkey_pack handles) to the direct algorithms: auto (only with an RDMA-class device, where reads need nothing of the peer), on (also elsewhere: UCX then emulates the reads with messages the peer's progress serves), off"},
    {"CHORUS_UCX_ERR_MODE", "auto", "UCX endpoints' error handling: peer (a broken link fails the connection; UCX then uses no shared memory), none (shared memory allowed; a dead peer is found by chorus's liveness check), auto: peer for other hosts and for same-host peers when UCX_TLS allows no shared memory, none otherwise"},
    {"CHORUS_IB_HCA", "", "ibverbs transport (experimental): RDMA ports to use, NCCL_IB_HCA syntax: device[:port] items, comma-separated, matched as prefixes; ^ excludes, = exact names (default: every active port); a rank uses CHORUS_IB_NICS_PER_RANK of them from the (CHORUS_LOCAL_RANK * that)-th on, mod count"},
    {"CHORUS_IB_GID_INDEX", "0", "ibverbs transport: GID table index of the port (RoCE: picks the RoCE version and address; InfiniBand: unused unless routed)"},
    {"CHORUS_IB_TC", "0", "ibverbs transport: traffic class of RoCE packets (the GRH's)"},
    {"CHORUS_IB_SL", "0", "ibverbs transport: InfiniBand service level"},
    {"CHORUS_IB_TIMEOUT", "20", "ibverbs transport: queue pairs' local ACK timeout, 4.096 us * 2^value (1-31)"},
    {"CHORUS_IB_RETRY_CNT", "7", "ibverbs transport: queue pairs' transport retry count (0-7)"},
    {"CHORUS_IB_NICS_PER_RANK", "1", "ibverbs transport: NICs (ports) one rank stripes over, one queue pair per NIC per peer (1-16); rank with local rank l takes the accepted ports l*n .. l*n+n-1 (mod count); every rank must use the same value"},
    {"CHORUS_IB_STRIPE_MIN_BYTES", "512K", "ibverbs transport: messages of at least this many bytes (K/M/G suffixes) are cut into one piece per NIC when CHORUS_IB_NICS_PER_RANK > 1; smaller ones go whole, the NICs in turn"},
    {"CHORUS_IB_FORK_INIT", "1", "ibverbs transport: 1 calls ibv_fork_init() before the first device is opened, so a forked child does not corrupt registered memory; 0 leaves fork safety to the application (see README)"},
    {"CHORUS_CONNECT", "auto", "eager: connect every pair of ranks when the communicator is created (a failure anywhere reaches every rank directly); lazy: connect a pair at its first message (fewer sockets for large jobs); auto: eager up to 512 ranks, lazy above"},
    // Collectives
    {"CHORUS_ALGO", "", "force algorithms: 'ring' or per collective 'allreduce:ring,broadcast:chain'"},
    {"CHORUS_CHUNK_SIZE", "256K", "pipelining chunk of ring/chain schedules (bytes, K/M/G suffixes)"},
    {"CHORUS_PLAN_CACHE", "512", "prepared plans a communicator keeps, one per call signature (also at most 64 MiB of them); beyond, the least recently used is dropped and built again when its signature returns"},
    {"CHORUS_TIMEOUT", "300", "seconds any wait may last before the operation fails with chorusTimeout"},
    {"CHORUS_HEARTBEAT_TIMEOUT", "4", "seconds a peer may stay silent (no heartbeat: process stopped, host or link down, traffic dropped) before waits on it fail with chorusRemoteError; 0 turns heartbeats off"},
    {"CHORUS_SPIN_US", "20", "microseconds a wait spins before yielding, then blocking"},
    {"CHORUS_YIELD_US", "200", "microseconds a wait then gives up its core (sched_yield) between looks before it sleeps (futex, poll)"},
    // Topology
    {"CHORUS_COST", "", "overrides of the cost model's constants after the table and the calibration, as chorus-topo --constants takes them ('host.membw=25,shm.latency=0.8'; chorus-topo --tune shows the constants); every rank must set the same"},
    {"CHORUS_TUNE", "auto", "auto: the cost model's memory rates are measured once per host and boot (by one rank per host, cached in $XDG_RUNTIME_DIR/chorus or /tmp/chorus-<uid>) and its cache rule follows the detected L2; measure: that, and the link constants from a short ping-pong per link class at communicator creation (under 200 ms); off: the built-in table"},
    {"CHORUS_TOPO_FILE", "", "read this host's topology from a file (chorus JSON as written by CHORUS_TOPO_DUMP_FILE, or NCCL topology XML) instead of detecting it"},
    {"CHORUS_TOPO_DUMP_FILE", "", "write the detected topology of the host to this file as JSON (%h: host name, %p: pid)"},
    {"CHORUS_TOPO_DETECT", "", "topology detectors, comma-separated: hwloc or sysfs force the CPU/NUMA/PCI source, ^nvml, ^cuda, ^ibverbs turn one off (default: all built, hwloc before sysfs)"},
    // Logging
    {"CHORUS_DEBUG", "WARN", "log level: WARN, INFO or TRACE"},
    {"CHORUS_DEBUG_SUBSYS", "ALL", "subsystems logged at INFO/TRACE: INIT,TOPO,TUNE,NET,COLL or ALL"},
    {"CHORUS_DEBUG_FILE", "", "log to this file instead of stderr; %r rank, %p pid, %h hostname"},
};
constexpr int kNumVars = sizeof(kVars) / sizeof(kVars[0]);

const EnvVar& declared(std::string_view name) {
  const EnvVar* v = findEnvVar(name);
  if (!v) {
    // A programming error: every variable must be in the table above.
    std::fprintf(stderr, "chorus: internal error: undeclared environment variable %.*s\n",
                 static_cast<int>(name.size()), name.data());
    std::abort();
  }
  return *v;
}

}  // namespace

const EnvVar* envVarAt(int index) {
  if (index < 0 || index >= kNumVars) return nullptr;
  return &kVars[index];
}

const EnvVar* findEnvVar(std::string_view name) {
  for (const EnvVar& v : kVars)
    if (name == v.name) return &v;
  return nullptr;
}

std::string getString(std::string_view name) {
  const EnvVar& v = declared(name);
  const char* s = std::getenv(v.name);
  if (s && *s) return s;
  return v.defaultValue;
}

bool isSet(std::string_view name) {
  const char* s = std::getenv(declared(name).name);
  return s && *s;
}

StatusOr<int64_t> getInt(std::string_view name) {
  std::string s = getString(name);
  if (s.empty()) return invalidArgument(std::string(name) + " is not set");
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || end == s.c_str() || *end != '\0')
    return invalidArgument(std::string(name) + "='" + s + "' is not an integer");
  return static_cast<int64_t>(v);
}

StatusOr<double> getDouble(std::string_view name) {
  std::string s = getString(name);
  if (s.empty()) return invalidArgument(std::string(name) + " is not set");
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno || end == s.c_str() || *end != '\0')
    return invalidArgument(std::string(name) + "='" + s + "' is not a number");
  return v;
}

StatusOr<uint64_t> getBytes(std::string_view name) {
  std::string s = getString(name);
  if (s.empty()) return invalidArgument(std::string(name) + " is not set");
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno || end == s.c_str() || s[0] == '-')
    return invalidArgument(std::string(name) + "='" + s + "' is not a size");
  uint64_t mult = 1;
  if (*end) {
    switch (*end) {
      case 'k': case 'K': mult = 1ull << 10; break;
      case 'm': case 'M': mult = 1ull << 20; break;
      case 'g': case 'G': mult = 1ull << 30; break;
      default: return invalidArgument(std::string(name) + "='" + s + "' has an unknown suffix");
    }
    ++end;
    if (*end == 'i' || *end == 'B') ++end;
    if (*end == 'B') ++end;
    if (*end) return invalidArgument(std::string(name) + "='" + s + "' is not a size");
  }
  return static_cast<uint64_t>(v) * mult;
}

}  // namespace chorus::config
