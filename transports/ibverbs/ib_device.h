// Which RDMA port the ibverbs transport uses, and that port opened: the device list read
// through the verbs table, filtered by CHORUS_IB_HCA (NCCL_IB_HCA's syntax), and the port's
// attributes and GID that the queue-pair handshake needs.
//
// Internal to transports/ibverbs/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/base/verbs_api.h"

namespace chorus::ib {

/// CHORUS_IB_HCA: comma-separated `device[:port]` items. A leading `^` excludes the listed
/// ports instead of selecting them; a leading `=` (after `^`, if any) matches device names
/// exactly instead of by prefix. Empty: every device, every port.
struct HcaFilter {
  struct Item {
    std::string device;
    int port = -1;  ///< -1: any port
  };
  bool exclude = false;
  bool exact = false;
  std::vector<Item> items;

  static StatusOr<HcaFilter> parse(const std::string& spec);
  bool accepts(const std::string& device, int port) const;
};

/// The settings of the environment table that shape queue pairs (CHORUS_IB_*).
struct IbSettings {
  HcaFilter hca;
  int gidIndex = 0;
  int trafficClass = 0;
  int serviceLevel = 0;
  int timeout = 20;     ///< local ACK timeout: 4.096 us * 2^timeout
  int retryCount = 7;
  bool forkInit = true;
  int nicsPerRank = 1;                 ///< CHORUS_IB_NICS_PER_RANK: rails per connection
  size_t stripeMinBytes = 512 * 1024;  ///< CHORUS_IB_STRIPE_MIN_BYTES: striped from here on

  static StatusOr<IbSettings> fromEnvironment();
};

/// An active port that passed the filter.
struct PortInfo {
  std::string device;
  int port = 0;
  bool ethernet = false;  ///< RoCE: addressed by GID (GRH), else InfiniBand: by LID
  int mtu = 0;            ///< the port's active MTU, enum ibv_mtu
  std::string name() const { return device + ":" + std::to_string(port); }
};

/// Active ports accepted by `filter`, in device order; fails with the reason none can be used
/// (no device at all: the device list's errno, e.g. ENOSYS where the kernel has no RDMA).
StatusOr<std::vector<PortInfo>> findPorts(const VerbsApi& api, const HcaFilter& filter);

/// The ports one rank uses, one per rail: `perRank` consecutive ports of `ports` (in a
/// ring) from the (localRank * perRank)-th on, so that the ranks of a host share its NICs out.
/// Fails, naming the setting, if `ports` has fewer than `perRank`, or naming both ports if the
/// chosen ones differ in link layer or active MTU (the rails of a message must be alike).
StatusOr<std::vector<PortInfo>> portsForRank(const std::vector<PortInfo>& ports, int perRank,
                                             int localRank);

/// One opened port: device context, protection domain, the port's attributes and GID. Closed
/// by the destructor; shared by the transport and its connections.
class Nic {
 public:
  static StatusOr<std::shared_ptr<Nic>> open(const VerbsApi& api, const PortInfo& port,
                                             const IbSettings& settings);
  ~Nic();
  Nic(const Nic&) = delete;
  Nic& operator=(const Nic&) = delete;

  const VerbsApi& api() const { return api_; }
  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  const PortInfo& port() const { return port_; }
  const ibv_port_attr& attr() const { return attr_; }
  const ibv_gid& gid() const { return gid_; }
  const IbSettings& settings() const { return settings_; }
  std::string name() const { return port_.device + ":" + std::to_string(port_.port); }

 private:
  Nic(const VerbsApi& api, const PortInfo& port, const IbSettings& s)
      : api_(api), port_(port), settings_(s) {}

  const VerbsApi& api_;
  PortInfo port_;
  IbSettings settings_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_port_attr attr_{};
  ibv_gid gid_{};
};

}  // namespace chorus::ib
