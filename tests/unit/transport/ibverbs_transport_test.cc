// The ibverbs transport against the fake verbs layer (fake_verbs.h): device selection and its
// reasons, the queue-pair handshake's records and transitions for InfiniBand and RoCE, the
// registration cache, and the data protocol (advertisements, writes with immediate, credits,
// chunking, mismatches, cancel, close, a vanished peer). The same binary runs the transport
// conformance suite over the fake (ctest entry transport_conformance.ibverbs_fake).
//
// Nothing here touches real RDMA hardware or this machine's sysfs: the fake is installed
// before any test runs, and every test that changes its options puts the defaults back.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "src/core/peers.h"
#include "tests/support/scoped_env.h"
#include "tests/unit/transport/conformance.h"
#include "tests/unit/transport/fake_verbs.h"
#include "transports/ibverbs/ib_connection.h"
#include "transports/ibverbs/ib_device.h"
#include "transports/ibverbs/ib_transport.h"
#include "transports/ibverbs/qp_setup.h"
#include "transports/ibverbs/reg_cache.h"
#include "transports/transport.h"

namespace chorus::conformance {
namespace {

// CHORUS_TEST_FAKE_DEVICES sets the fake's device count for the whole run: ctest runs the
// conformance suite once more over two devices with two NICs per rank.
ib::fake::Options fakeForRun() {
  ib::fake::Options o;
  if (const char* n = std::getenv("CHORUS_TEST_FAKE_DEVICES")) o.devices = std::atoi(n);
  return o;
}
const bool kFakeInstalled = (ib::fake::install(fakeForRun()), true);

using chorus::testing::ScopedEnv;

// Fake options for one test; the defaults again afterwards.
class ScopedFake {
 public:
  explicit ScopedFake(const ib::fake::Options& o) { ib::fake::install(o); }
  ~ScopedFake() { ib::fake::install(); }
};

const TransportFactory& ibKind() {
  const TransportFactory* f = findTransport("ibverbs");
  EXPECT_NE(f, nullptr) << "the ibverbs transport is not registered";
  return *f;
}

// ---- Device selection and eligibility --------------------------------------------------------

TEST(IbHcaFilter, NcclSyntax) {
  auto any = ib::HcaFilter::parse("");
  ASSERT_TRUE(any.ok());
  EXPECT_TRUE(any->accepts("mlx5_3", 2));
  auto prefix = ib::HcaFilter::parse("mlx5");
  ASSERT_TRUE(prefix.ok());
  EXPECT_TRUE(prefix->accepts("mlx5_0", 1));
  EXPECT_FALSE(prefix->accepts("bnxt_re0", 1));
  auto exact = ib::HcaFilter::parse("=mlx5_1:2,mlx5_0");
  ASSERT_TRUE(exact.ok());
  EXPECT_TRUE(exact->accepts("mlx5_1", 2));
  EXPECT_FALSE(exact->accepts("mlx5_1", 1));
  EXPECT_TRUE(exact->accepts("mlx5_0", 1));
  EXPECT_FALSE(exact->accepts("mlx5_10", 1)) << "= matches whole names";
  auto excl = ib::HcaFilter::parse("^=mlx5_1");
  ASSERT_TRUE(excl.ok());
  EXPECT_FALSE(excl->accepts("mlx5_1", 1));
  EXPECT_TRUE(excl->accepts("mlx5_0", 1));
  for (const char* bad : {"mlx5_0:x", "mlx5_0:0", "mlx5_0:", ":1"}) {
    auto f = ib::HcaFilter::parse(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
    EXPECT_NE(f.status().message().find("CHORUS_IB_HCA"), std::string::npos)
        << f.status().message();
  }
}

TEST(IbEligibility, NullDeviceListWithEnosysIsNotEligibleAndSaysWhy) {
  ib::fake::Options o;
  o.nullList = true;
  o.listErrno = ENOSYS;
  ScopedFake fake(o);
  const char* why = ibKind().unavailable();
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::string(why).find("no RDMA device"), std::string::npos) << why;
  EXPECT_NE(std::string(why).find(std::strerror(ENOSYS)), std::string::npos) << why;
}

TEST(IbEligibility, ZeroDevicesOrNoActivePortIsNotEligible) {
  {
    ib::fake::Options o;
    o.devices = 0;
    ScopedFake fake(o);
    const char* why = ibKind().unavailable();
    ASSERT_NE(why, nullptr);
    EXPECT_NE(std::string(why).find("found none"), std::string::npos) << why;
  }
  {
    ib::fake::Options o;
    o.portActive = false;
    ScopedFake fake(o);
    const char* why = ibKind().unavailable();
    ASSERT_NE(why, nullptr);
    EXPECT_NE(std::string(why).find("fake_0:1 is not active"), std::string::npos) << why;
  }
  {
    ScopedEnv env("CHORUS_IB_HCA", "mlx5");
    const char* why = ibKind().unavailable();
    ASSERT_NE(why, nullptr);
    EXPECT_NE(std::string(why).find("CHORUS_IB_HCA"), std::string::npos) << why;
  }
  ScopedEnv env("CHORUS_IB_HCA", "=fake_0:1");
  EXPECT_EQ(ibKind().unavailable(), nullptr);
}

TEST(IbEligibility, ForcedWithoutADeviceIsAClearError) {
  ib::fake::Options o;
  o.nullList = true;
  ScopedFake fake(o);
  ScopedEnv env("CHORUS_TRANSPORT", "ibverbs");
  PeerInfo self;
  auto peers = Peers::create(contextFor(0, 2, 5), &self);
  ASSERT_FALSE(peers.ok());
  EXPECT_EQ(peers.status().code(), Code::kInvalidArgument);
  const std::string m = peers.status().message();
  EXPECT_NE(m.find("CHORUS_TRANSPORT='ibverbs'"), std::string::npos) << m;
  EXPECT_NE(m.find("no RDMA device"), std::string::npos) << m;
}

TEST(IbEligibility, ScoresBelowTcpAndRefusesForeignBlobs) {
  auto t = ibKind().create(contextFor(0, 2, 7));
  ASSERT_TRUE(t.ok()) << t.status().toString();
  EndpointBlob blob;
  ASSERT_TRUE((*t)->listen(&blob).ok());
  const Reach r = (*t)->canConnect(identity(0), identity(1), blob);
  ASSERT_TRUE(r.ok);
  EXPECT_LT(r.score, 10) << "never chosen over tcp before it has run on hardware";
  EXPECT_FALSE((*t)->canConnect(identity(0), identity(1), {}).ok);
  EXPECT_FALSE((*t)->canConnect(identity(0), identity(1), EndpointBlob(40, 7)).ok);
  EXPECT_GE(ib::fake::forkInitCalls(), 1) << "CHORUS_IB_FORK_INIT=1 is the default";
}

TEST(IbEligibility, BadSettingsAreRefusedNamingTheVariable) {
  ScopedEnv env("CHORUS_IB_RETRY_CNT", "9");
  auto t = ibKind().create(contextFor(0, 2, 7));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("CHORUS_IB_RETRY_CNT=9"), std::string::npos)
      << t.status().message();
}

// ---- The handshake's record and transitions --------------------------------------------------

ib::QpInfo sampleInfo() {
  ib::QpInfo q;
  q.rank = 3;
  q.commId = 0x1122334455667788ull;
  q.lid = 0x21;
  q.port = 1;
  q.ethernet = true;
  q.mtu = IBV_MTU_2048;
  q.qpn = 0xabcdef;
  q.psn = 0x123456;
  for (int i = 0; i < 16; ++i) q.gid[i] = static_cast<uint8_t>(i * 7 + 1);
  q.inboxAddr = 0x7f0012345000ull;
  q.inboxRkey = 0xdeadbeef;
  q.slots = 32;
  q.rail = 1;
  q.rails = 2;
  return q;
}

TEST(IbQpInfo, RoundTripsAndRefusesBadRecords) {
  const ib::QpInfo q = sampleInfo();
  const std::vector<uint8_t> b = q.encode();
  ASSERT_EQ(b.size(), ib::QpInfo::kWireBytes);
  auto d = ib::QpInfo::decode(b, "rank 3");
  ASSERT_TRUE(d.ok()) << d.status().toString();
  EXPECT_EQ(d->encode(), b);
  EXPECT_EQ(d->qpn, q.qpn);
  EXPECT_EQ(d->psn, q.psn);
  EXPECT_EQ(std::memcmp(d->gid, q.gid, 16), 0);
  EXPECT_EQ(d->inboxAddr, q.inboxAddr);

  std::vector<uint8_t> shortRec(b.begin(), b.end() - 1);
  auto s = ib::QpInfo::decode(shortRec, "rank 3");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("rank 3"), std::string::npos);
  std::vector<uint8_t> foreign = b;
  foreign[0] ^= 1;
  EXPECT_FALSE(ib::QpInfo::decode(foreign, "rank 3").ok());
  std::vector<uint8_t> version = b;
  version[4] = 9;
  auto v = ib::QpInfo::decode(version, "rank 3");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("version 9"), std::string::npos);
  ib::QpInfo big = q;
  big.qpn = 1u << 24;
  EXPECT_FALSE(ib::QpInfo::decode(big.encode(), "rank 3").ok());
  ib::QpInfo mtu = q;
  mtu.mtu = 6;
  EXPECT_FALSE(ib::QpInfo::decode(mtu.encode(), "rank 3").ok());

  ib::QpInfo local = q, remote = q;
  remote.ethernet = false;
  remote.rank = 4;
  Status c = ib::compatible(local, remote);
  EXPECT_EQ(c.code(), Code::kInvalidArgument);
  EXPECT_NE(c.message().find("rank 4's is InfiniBand"), std::string::npos) << c.message();
  remote = q;
  remote.commId = 1;
  EXPECT_FALSE(ib::compatible(local, remote).ok());
}

std::shared_ptr<ib::Nic> openFakeNic() {
  std::string why;
  const ib::VerbsApi* api = ib::verbs(&why);
  EXPECT_NE(api, nullptr) << why;
  auto settings = ib::IbSettings::fromEnvironment();
  EXPECT_TRUE(settings.ok());
  auto ports = ib::findPorts(*api, settings->hca);
  EXPECT_TRUE(ports.ok()) << ports.status().toString();
  auto nic = ib::Nic::open(*api, ports->front(), *settings);
  EXPECT_TRUE(nic.ok()) << nic.status().toString();
  return *nic;
}

TEST(IbTransitions, InfiniBandAddressesByLid) {
  ScopedEnv sl("CHORUS_IB_SL", "3");
  ScopedEnv timeout("CHORUS_IB_TIMEOUT", "18");
  ScopedEnv retry("CHORUS_IB_RETRY_CNT", "5");
  auto nic = openFakeNic();
  ASSERT_TRUE(nic);
  ib::QpInfo local = sampleInfo(), remote = sampleInfo();
  local.ethernet = remote.ethernet = false;
  local.mtu = IBV_MTU_4096;
  remote.mtu = IBV_MTU_1024;
  remote.lid = 0x33;
  remote.qpn = 0x777;
  remote.psn = 0x4242;

  const ib::Transition init = ib::initTransition(*nic);
  EXPECT_EQ(init.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  EXPECT_EQ(init.attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(init.attr.port_num, 1);
  EXPECT_EQ(init.attr.qp_access_flags, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

  const ib::Transition rtr = ib::rtrTransition(*nic, local, remote);
  EXPECT_EQ(rtr.mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                          IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  EXPECT_EQ(rtr.attr.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(rtr.attr.path_mtu, IBV_MTU_1024) << "the smaller of the two ports' MTUs";
  EXPECT_EQ(rtr.attr.dest_qp_num, 0x777u);
  EXPECT_EQ(rtr.attr.rq_psn, 0x4242u);
  EXPECT_EQ(rtr.attr.ah_attr.is_global, 0);
  EXPECT_EQ(rtr.attr.ah_attr.dlid, 0x33);
  EXPECT_EQ(rtr.attr.ah_attr.sl, 3);
  EXPECT_EQ(rtr.attr.ah_attr.port_num, 1);

  const ib::Transition rts = ib::rtsTransition(*nic, local);
  EXPECT_EQ(rts.mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                          IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
  EXPECT_EQ(rts.attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(rts.attr.sq_psn, local.psn);
  EXPECT_EQ(rts.attr.timeout, 18);
  EXPECT_EQ(rts.attr.retry_cnt, 5);
  EXPECT_EQ(rts.attr.rnr_retry, 7);
}

TEST(IbTransitions, RoceAddressesByGidWithTrafficClass) {
  ib::fake::Options o;
  o.ethernet = true;
  ScopedFake fake(o);
  ScopedEnv gid("CHORUS_IB_GID_INDEX", "3");
  ScopedEnv tc("CHORUS_IB_TC", "106");
  auto nic = openFakeNic();
  ASSERT_TRUE(nic);
  EXPECT_TRUE(nic->port().ethernet);
  EXPECT_EQ(nic->gid().raw[15], 3) << "the GID of CHORUS_IB_GID_INDEX";
  ib::QpInfo local = sampleInfo(), remote = sampleInfo();
  remote.lid = 0;
  const ib::Transition rtr = ib::rtrTransition(*nic, local, remote);
  EXPECT_EQ(rtr.attr.ah_attr.is_global, 1);
  EXPECT_EQ(rtr.attr.ah_attr.dlid, 0);
  EXPECT_EQ(std::memcmp(rtr.attr.ah_attr.grh.dgid.raw, remote.gid, 16), 0);
  EXPECT_EQ(rtr.attr.ah_attr.grh.sgid_index, 3);
  EXPECT_EQ(rtr.attr.ah_attr.grh.traffic_class, 106);
  EXPECT_EQ(rtr.attr.ah_attr.grh.hop_limit, 255);
  EXPECT_EQ(rtr.mask & IBV_QP_AV, IBV_QP_AV);
}

// ---- The registration cache ------------------------------------------------------------------

TEST(IbRegCache, PageAlignedSharedByCountAndReleasedAtZero) {
  auto nic = openFakeNic();
  ASSERT_TRUE(nic);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const int mrsBefore = ib::fake::live().mrs;
  ib::RegCache cache(nic->api(), nic->pd(), IBV_ACCESS_LOCAL_WRITE, page);
  std::vector<uint8_t> buf(8 * page);
  uint8_t* mid = buf.data() + page + 100;  // inside a page, not at its start

  auto a = cache.acquire(mid, 10);
  ASSERT_TRUE(a.ok());
  const ibv_mr* mr = a->entry->mr;
  const auto addr = reinterpret_cast<uintptr_t>(mr->addr);
  EXPECT_EQ(addr % page, 0u);
  EXPECT_EQ(mr->length % page, 0u);
  EXPECT_LE(addr, reinterpret_cast<uintptr_t>(mid));
  EXPECT_GE(addr + mr->length, reinterpret_cast<uintptr_t>(mid) + 10);

  // Another range in the same page shares the registration.
  auto b = cache.acquire(mid + 200, 50);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->entry, a->entry);
  EXPECT_EQ(cache.registrations(), 1u);
  // A range overlapping it but reaching past its pages gets one of its own.
  auto c = cache.acquire(mid, 2 * page);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->entry, a->entry);
  EXPECT_EQ(cache.regions(), 2u);
  // ... which then covers what lies inside it.
  auto d = cache.acquire(mid + page, 8);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->entry == c->entry || d->entry == a->entry);
  EXPECT_EQ(cache.registrations(), 2u);
  // Empty ranges register nothing.
  auto e = cache.acquire(mid, 0);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->entry, nullptr);
  EXPECT_EQ(ib::fake::live().mrs, mrsBefore + 2);

  cache.release(*a);
  EXPECT_EQ(cache.regions(), 2u) << "still held by b";
  for (auto* r : {&*b, &*d, &*e, &*c}) cache.release(*r);
  EXPECT_EQ(cache.regions(), 0u) << "released at zero: no registration outlives its users";
  EXPECT_EQ(ib::fake::live().mrs, mrsBefore);
}

// ---- Pairs of transports over the fake -------------------------------------------------------

struct Pair {
  std::vector<std::shared_ptr<Transport>> t;
  std::vector<ConnPtr> c;  // c[0]: rank 0's to rank 1; c[1]: rank 1's to rank 0
};

// Settings of each rank while its transport is made (empty: unset).
struct RankEnv {
  std::string localRank;
  std::string nicsPerRank;
};

// Both ranks' transports and what their connect() calls returned.
struct Attempt {
  std::vector<std::shared_ptr<Transport>> t;
  std::vector<StatusOr<ConnPtr>> c;
};

Attempt tryPair(const std::vector<RankEnv>& env) {
  Attempt a;
  const uint64_t comm = randomU64();
  std::vector<EndpointBlob> blobs(2);
  for (int r = 0; r < 2; ++r) {
    std::vector<std::unique_ptr<ScopedEnv>> set;
    if (!env.empty() && !env[r].localRank.empty())
      set.push_back(std::make_unique<ScopedEnv>("CHORUS_LOCAL_RANK", env[r].localRank.c_str()));
    if (!env.empty() && !env[r].nicsPerRank.empty())
      set.push_back(
          std::make_unique<ScopedEnv>("CHORUS_IB_NICS_PER_RANK", env[r].nicsPerRank.c_str()));
    auto t = ibKind().create(contextFor(r, 2, comm));
    EXPECT_TRUE(t.ok()) << t.status().toString();
    if (!t.ok()) return a;
    a.t.push_back(std::move(t).value());
    EXPECT_TRUE(a.t.back()->listen(&blobs[r]).ok());
  }
  std::vector<std::future<StatusOr<ConnPtr>>> f;
  for (int r = 0; r < 2; ++r)
    f.push_back(onThread([t = a.t[r], b = blobs[1 - r], r]() -> StatusOr<ConnPtr> {
      return t->connect(1 - r, b, kConnectSeconds);
    }));
  for (int r = 0; r < 2; ++r) {
    auto c = joinWithin(f[r], seconds(kConnectSeconds) + kHangMargin, "connect");
    if (!c) return Attempt{};
    a.c.push_back(std::move(*c));
  }
  return a;
}

Pair makePair(const std::vector<RankEnv>& env = {}) {
  Attempt a = tryPair(env);
  if (a.c.size() != 2) return Pair{};
  Pair p;
  p.t = a.t;
  for (auto& c : a.c) {
    EXPECT_TRUE(c.ok()) << c.status().toString();
    if (!c.ok()) return Pair{};
    p.c.push_back(std::move(c).value());
  }
  return p;
}

ib::IbConnection& ibConn(const ConnPtr& c) { return dynamic_cast<ib::IbConnection&>(*c); }

TEST(IbHandshake, EachQueuePairGoesInitRtrRtsTowardTheOther) {
  for (bool roce : {false, true}) {
    SCOPED_TRACE(roce ? "RoCE" : "InfiniBand");
    ib::fake::Options o;
    o.ethernet = roce;
    ScopedFake fake(o);
    const size_t before = ib::fake::modifyCalls().size();
    Pair p = makePair();
    ASSERT_EQ(p.c.size(), 2u);
    const uint32_t qpn[2] = {ibConn(p.c[0]).qp()->qp_num, ibConn(p.c[1]).qp()->qp_num};
    const auto calls = ib::fake::modifyCalls();
    for (int r = 0; r < 2; ++r) {
      std::vector<ib::fake::ModifyCall> mine;
      for (size_t i = before; i < calls.size(); ++i)
        if (calls[i].qpn == qpn[r]) mine.push_back(calls[i]);
      ASSERT_EQ(mine.size(), 3u);
      EXPECT_EQ(mine[0].attr.qp_state, IBV_QPS_INIT);
      EXPECT_EQ(mine[1].attr.qp_state, IBV_QPS_RTR);
      EXPECT_EQ(mine[2].attr.qp_state, IBV_QPS_RTS);
      EXPECT_EQ(mine[1].attr.dest_qp_num, qpn[1 - r]);
      EXPECT_EQ(mine[1].attr.ah_attr.is_global, roce ? 1 : 0);
      EXPECT_EQ(ibConn(p.c[r]).qp()->state, IBV_QPS_RTS);
    }
    // The fake delivers only between queue pairs that name each other with matching PSNs.
    expectTransfer(*p.c[0], *p.c[1], randomBytes(5000), 9);
    expectTransfer(*p.c[1], *p.c[0], randomBytes(17), 10);
  }
}

TEST(IbHandshake, RanksOfAHostSpreadOverItsPortsByLocalRank) {
  ib::fake::Options o;
  o.devices = 2;
  ScopedFake fake(o);
  Pair p = makePair({{"2", ""}, {"3", ""}});
  ASSERT_EQ(p.c.size(), 2u);
  const ib::VerbsApi* api = ib::verbs(nullptr);
  ASSERT_NE(api, nullptr);
  EXPECT_STREQ(api->get_device_name(ibConn(p.c[0]).qp()->context->device), "fake_0");
  EXPECT_STREQ(api->get_device_name(ibConn(p.c[1]).qp()->context->device), "fake_1");
  // The fake delivers only to the LID of the device the peer's queue pair lives on.
  expectTransfer(*p.c[0], *p.c[1], randomBytes(10000), 1);
  expectTransfer(*p.c[1], *p.c[0], randomBytes(10), 2);
}

TEST(IbProtocol, MoreMessagesThanSlotsAndChunkedWritesArriveInOrder) {
  ib::fake::Options o;
  o.maxMsg = 4096;  // every message above 4 KiB goes in several writes
  ScopedFake fake(o);
  const int rnrBefore = ib::fake::rnrViolations();
  Pair p = makePair();
  ASSERT_EQ(p.c.size(), 2u);
  constexpr int kCount = 3 * static_cast<int>(ib::Rail::kSlots) + 5;
  std::vector<std::vector<uint8_t>> out, in;
  std::vector<Pending> ops;
  for (int i = 0; i < kCount; ++i) {
    // The last one, 1 MiB, needs more 4 KiB writes than the send queue holds.
    const size_t n = i == kCount - 1 ? size_t{1} << 20
                     : i % 7 == 0    ? 0
                                     : static_cast<size_t>(i * 977 % 20000);
    out.push_back(randomBytes(n));
    in.emplace_back(out.back().size(), kPoison);
  }
  for (int i = 0; i < kCount; ++i) {
    auto s = p.c[0]->postSend(out[i].data(), out[i].size(), static_cast<Tag>(100 + i));
    auto r = p.c[1]->postRecv(in[i].data(), in[i].size(), static_cast<Tag>(100 + i));
    ASSERT_TRUE(s.ok() && r.ok());
    ops.push_back({p.c[0].get(), *s});
    ops.push_back({p.c[1].get(), *r});
  }
  Status st = driveAll(ops);
  ASSERT_TRUE(st.ok()) << st.toString();
  for (int i = 0; i < kCount; ++i) EXPECT_TRUE(in[i] == out[i]) << "message " << i;
  EXPECT_EQ(ib::fake::rnrViolations(), rnrBefore) << "a write found no receive posted";
  uint64_t total = 0;
  for (const auto& v : out) total += v.size();
  EXPECT_EQ(p.c[0]->stats().bytesSent, total);
  EXPECT_EQ(p.c[1]->stats().bytesRecv, total);
}

TEST(IbProtocol, ReceiverBufferIsWrittenOnlyAfterItAdvertised) {
  Pair p = makePair();
  ASSERT_EQ(p.c.size(), 2u);
  const std::vector<uint8_t> v = randomBytes(300);
  std::vector<uint8_t> got(v.size(), kPoison);
  auto s = p.c[0]->postSend(v.data(), v.size(), 1);
  ASSERT_TRUE(s.ok());
  bool done = false;
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(p.c[0]->test(*s, &done).ok());
  EXPECT_FALSE(done) << "a send completed before any receive was advertised";
  auto r = p.c[1]->postRecv(got.data(), got.size(), 1);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(driveAll({{p.c[0].get(), *s}, {p.c[1].get(), *r}}).ok());
  EXPECT_TRUE(got == v);
}

TEST(IbProtocol, CompletionChannelWakesASleeper) {
  Pair p = makePair();
  ASSERT_EQ(p.c.size(), 2u);
  uint64_t x = 0x1234, y = 0;
  auto r = p.c[1]->postRecv(&y, 8, 4);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(p.c[1]->progress().ok());  // advertises: the advertisement's own completion
  ASSERT_TRUE(p.c[1]->progress().ok());  // takes that completion's event, re-arms the queue
  int fd = -1;
  short events = 0;
  p.c[1]->pollInfo(&fd, &events);
  ASSERT_GE(fd, 0);
  pollfd pfd{fd, events, 0};
  EXPECT_EQ(::poll(&pfd, 1, 0), 0) << "readable before anything arrived";
  auto s = p.c[0]->postSend(&x, 8, 4);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(p.c[0]->progress().ok());  // the fake writes synchronously
  pfd.revents = 0;
  EXPECT_EQ(::poll(&pfd, 1, 0), 1) << "the data's completion did not wake the fd";
  ASSERT_TRUE(driveAll({{p.c[0].get(), *s}, {p.c[1].get(), *r}}).ok());
  EXPECT_EQ(y, x);
}

TEST(IbProtocol, MismatchFailsBothEndsNamingBoth) {
  Pair p = makePair();
  ASSERT_EQ(p.c.size(), 2u);
  const std::vector<uint8_t> v = randomBytes(1000);
  std::vector<uint8_t> got(999, kPoison);
  auto s = p.c[0]->postSend(v.data(), v.size(), 12);
  auto r = p.c[1]->postRecv(got.data(), got.size(), 13);
  ASSERT_TRUE(s.ok() && r.ok());
  Status rs = outcome(*p.c[1], *r, kPromptSeconds, {p.c[0].get()});
  EXPECT_EQ(rs.code(), Code::kInvalidUsage) << rs.toString();
  for (const char* part : {"rank 0", "rank 1", "1000", "999", "tag 12", "tag 13"})
    EXPECT_NE(rs.message().find(part), std::string::npos) << part << " in " << rs.message();
  Status ss = outcome(*p.c[0], *s, kPromptSeconds);
  EXPECT_EQ(ss.code(), Code::kInvalidUsage) << ss.toString();
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t b) { return b == kPoison; }));
  EXPECT_EQ(ibConn(p.c[0]).qp()->state, IBV_QPS_ERR) << "a failed queue pair is flushed";
}

TEST(IbProtocol, CancelReachesThePeerWithTheMappedCode) {
  Pair p = makePair();
  ASSERT_EQ(p.c.size(), 2u);
  uint64_t a = 0, b = 0;
  auto peerOp = p.c[0]->postRecv(&a, 8, 1);
  auto ownOp = p.c[1]->postSend(&b, 8, 1);
  ASSERT_TRUE(peerOp.ok() && ownOp.ok());
  ASSERT_TRUE(p.c[1]->cancel(timeoutError("rank 1 gave up")).ok());
  Status own = outcome(*p.c[1], *ownOp, kPromptSeconds);
  EXPECT_EQ(own.code(), Code::kTimeout) << own.toString();
  Status peer = outcome(*p.c[0], *peerOp, kPromptSeconds);
  EXPECT_EQ(peer.code(), Code::kRemoteError) << peer.toString();
  EXPECT_NE(peer.message().find("rank 1 gave up"), std::string::npos) << peer.message();
}

TEST(IbProtocol, PeerThatVanishesFailsPendingOpsNamingIt) {
  Pair p = makePair();
  ASSERT_EQ(p.c.size(), 2u);
  // Rank 1's host dies: its queue pair stops answering, no CLOSE is sent.
  ib::fake::unplug(ibConn(p.c[1]).qp()->qp_num);
  uint64_t x = 7;
  auto r = p.c[0]->postRecv(&x, 8, 1);
  ASSERT_TRUE(r.ok());
  Status st = outcome(*p.c[0], *r, kPromptSeconds);
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.toString();
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("retry count exceeded"), std::string::npos) << st.message();
}

TEST(IbProtocol, PeerGoneDeliversWhatArrivedThenFailsTheRest) {
  Pair p = makePair();
  ASSERT_EQ(p.c.size(), 2u);
  const std::vector<uint8_t> v = randomBytes(3000);
  std::vector<uint8_t> got(v.size(), kPoison);
  uint64_t more = 0;
  auto r1 = p.c[1]->postRecv(got.data(), got.size(), 1);
  auto r2 = p.c[1]->postRecv(&more, 8, 2);
  auto s = p.c[0]->postSend(v.data(), v.size(), 1);
  ASSERT_TRUE(r1.ok() && r2.ok() && s.ok());
  ASSERT_TRUE(p.c[1]->progress().ok());  // advertise
  ASSERT_TRUE(driveAll({{p.c[0].get(), *s}}).ok());
  const Status why = remoteError("rank 0 (pid 4242) is gone: killed by signal 9");
  p.c[1]->peerGone(why);
  EXPECT_TRUE(outcome(*p.c[1], *r1).ok());
  EXPECT_TRUE(got == v);
  Status st = outcome(*p.c[1], *r2, kPromptSeconds);
  EXPECT_EQ(st.message(), why.message());
  EXPECT_EQ(outcome(*p.c[1], p.c[1]->postSend(&more, 8, 3)).message(), why.message());
}

TEST(IbProtocol, DestroyingEverythingLeavesNoVerbsObject) {
  const ib::fake::Live before = ib::fake::live();
  {
    Pair p = makePair();
    ASSERT_EQ(p.c.size(), 2u);
    expectTransfer(*p.c[0], *p.c[1], randomBytes(100000), 3);
    std::vector<uint8_t> pending(64);
    ASSERT_TRUE(p.c[1]->postRecv(pending.data(), pending.size(), 4).ok());
    ASSERT_TRUE(p.c[1]->progress().ok());
  }
  const ib::fake::Live after = ib::fake::live();
  EXPECT_EQ(after.qps, before.qps);
  EXPECT_EQ(after.mrs, before.mrs);
  EXPECT_EQ(after.cqs, before.cqs);
  EXPECT_EQ(after.channels, before.channels);
  EXPECT_EQ(after.pds, before.pds);
  EXPECT_EQ(after.contexts, before.contexts);
}


// ---- Several NICs per rank: rails and striping -------------------------------------------------

TEST(IbStripe, CutsContiguousAlignedPiecesOneRailEach) {
  constexpr size_t kMin = 64 << 10;
  for (int rails : {1, 2, 3, 4})
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{4095}, kMin - 1, kMin, size_t{100000},
                         size_t{1} << 20, (size_t{1} << 20) + 1, size_t{3} << 20})
      for (uint64_t msg : {0u, 1u, 5u}) {
        SCOPED_TRACE(std::to_string(bytes) + " bytes, message " + std::to_string(msg) + ", " +
                     std::to_string(rails) + " rails");
        const std::vector<ib::Piece> pieces = ib::stripe(bytes, msg, rails, kMin);
        ASSERT_FALSE(pieces.empty());
        size_t at = 0;
        for (const ib::Piece& p : pieces) {
          EXPECT_EQ(p.offset, at) << "contiguous, in order";
          EXPECT_TRUE(p.bytes > 0 || bytes == 0) << "no empty piece";
          at += p.bytes;
        }
        EXPECT_EQ(at, bytes);
        if (rails == 1 || bytes < kMin) {
          ASSERT_EQ(pieces.size(), 1u);
          EXPECT_EQ(pieces[0].rail, static_cast<int>(msg % static_cast<uint64_t>(rails)));
          continue;
        }
        ASSERT_EQ(pieces.size(), static_cast<size_t>(rails));
        for (size_t i = 0; i < pieces.size(); ++i) {
          EXPECT_EQ(pieces[i].rail, static_cast<int>(i));
          EXPECT_EQ(pieces[i].offset % ib::kStripeAlign, 0u);
          EXPECT_LE(pieces[i].bytes, pieces[0].bytes);
        }
        const size_t fair = (bytes + static_cast<size_t>(rails) - 1) / static_cast<size_t>(rails);
        EXPECT_LT(pieces[0].bytes, fair + ib::kStripeAlign) << "even up to the alignment";
      }
  using P = std::vector<ib::Piece>;
  constexpr size_t kHalf = 512 << 10;
  EXPECT_EQ(ib::stripe(1 << 20, 7, 2, kHalf), (P{{0, 0, kHalf}, {1, kHalf, kHalf}}));
  EXPECT_EQ(ib::stripe(100000, 0, 3, 4096), (P{{0, 0, 36864}, {1, 36864, 36864},
                                               {2, 73728, 26272}}));
  EXPECT_EQ(ib::stripe(5000, 0, 4, 1), (P{{0, 0, 4096}, {1, 4096, 904}})) << "fewer pieces";
  EXPECT_EQ(ib::stripe((512 << 10) - 1, 3, 2, 512 << 10), (P{{1, 0, (512 << 10) - 1}}));
}

TEST(IbSettings, NicsPerRankAndStripeMinAreParsedAndBadValuesRefused) {
  {
    auto s = ib::IbSettings::fromEnvironment();
    ASSERT_TRUE(s.ok()) << s.status().toString();
    EXPECT_EQ(s->nicsPerRank, 1) << "one NIC per rank unless asked";
    EXPECT_EQ(s->stripeMinBytes, size_t{512} << 10);
  }
  {
    ScopedEnv n("CHORUS_IB_NICS_PER_RANK", "2");
    ScopedEnv m("CHORUS_IB_STRIPE_MIN_BYTES", "1M");
    auto s = ib::IbSettings::fromEnvironment();
    ASSERT_TRUE(s.ok()) << s.status().toString();
    EXPECT_EQ(s->nicsPerRank, 2);
    EXPECT_EQ(s->stripeMinBytes, size_t{1} << 20);
  }
  for (const char* name : {"CHORUS_IB_NICS_PER_RANK", "CHORUS_IB_STRIPE_MIN_BYTES"})
    for (const char* bad : {"0", "17", "two"}) {
      if (std::string(name) == "CHORUS_IB_STRIPE_MIN_BYTES" && std::string(bad) == "17")
        continue;  // a fine byte count
      ScopedEnv env(name, bad);
      auto s = ib::IbSettings::fromEnvironment();
      ASSERT_FALSE(s.ok()) << name << "=" << bad;
      EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
      EXPECT_NE(s.status().message().find(name), std::string::npos) << s.status().message();
    }
  ScopedEnv n("CHORUS_IB_NICS_PER_RANK", "2");
  auto t = ibKind().create(contextFor(0, 2, 7));
  ASSERT_FALSE(t.ok()) << "one fake device, two NICs asked for";
  EXPECT_NE(t.status().message().find("CHORUS_IB_NICS_PER_RANK=2 but 1 active port"),
            std::string::npos)
      << t.status().message();
}

std::string portNames(const StatusOr<std::vector<ib::PortInfo>>& ports) {
  if (!ports.ok()) return ports.status().message();
  std::string out;
  for (const ib::PortInfo& p : ports.value()) out += (out.empty() ? "" : ",") + p.name();
  return out;
}

TEST(IbSettings, RanksOfAHostShareThePortsOutAndNeverMixKinds) {
  std::vector<ib::PortInfo> ports;
  for (int i = 0; i < 4; ++i)
    ports.push_back({"mlx5_" + std::to_string(i), 1, false, IBV_MTU_4096});
  EXPECT_EQ(portNames(ib::portsForRank(ports, 1, 0)), "mlx5_0:1");
  EXPECT_EQ(portNames(ib::portsForRank(ports, 1, 5)), "mlx5_1:1") << "as before: local rank mod 4";
  EXPECT_EQ(portNames(ib::portsForRank(ports, 2, 0)), "mlx5_0:1,mlx5_1:1");
  EXPECT_EQ(portNames(ib::portsForRank(ports, 2, 1)), "mlx5_2:1,mlx5_3:1");
  EXPECT_EQ(portNames(ib::portsForRank(ports, 2, 2)), "mlx5_0:1,mlx5_1:1");
  EXPECT_EQ(portNames(ib::portsForRank(ports, 3, 1)), "mlx5_3:1,mlx5_0:1,mlx5_1:1");
  EXPECT_FALSE(ib::portsForRank(ports, 5, 0).ok());

  std::vector<ib::PortInfo> mixed = ports;
  mixed[1].ethernet = true;
  EXPECT_EQ(portNames(ib::portsForRank(mixed, 2, 0)).find("mlx5_0:1 (InfiniBand) and mlx5_1:1 "
                                                          "(RoCE)"),
            0u + std::string("ibverbs: one rank would stripe over ").size());
  EXPECT_EQ(portNames(ib::portsForRank(mixed, 2, 1)), "mlx5_2:1,mlx5_3:1");
  std::vector<ib::PortInfo> mtu = ports;
  mtu[1].mtu = IBV_MTU_2048;
  const std::string m = portNames(ib::portsForRank(mtu, 2, 0));
  EXPECT_NE(m.find("mlx5_0:1 (MTU 4096) and mlx5_1:1 (MTU 2048)"), std::string::npos) << m;

  // The same through the fake's ports: an InfiniBand device next to a RoCE one.
  ib::fake::Options o;
  o.devices = 2;
  o.roceDevices = 2;
  ScopedFake fake(o);
  ScopedEnv n("CHORUS_IB_NICS_PER_RANK", "2");
  auto t = ibKind().create(contextFor(0, 2, 7));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("fake_0:1 (InfiniBand) and fake_1:1 (RoCE)"),
            std::string::npos)
      << t.status().message();
}

// Two fake devices; each rank stripes over both, messages from 64 KiB on.
class TwoNics {
 public:
  explicit TwoNics(uint32_t maxMsg = 1u << 31) : fake_(options(maxMsg)) {}

 private:
  static ib::fake::Options options(uint32_t maxMsg) {
    ib::fake::Options o;
    o.devices = 2;
    o.maxMsg = maxMsg;
    return o;
  }
  ScopedFake fake_;
  ScopedEnv min_{"CHORUS_IB_STRIPE_MIN_BYTES", "64K"};
};
const std::vector<RankEnv> kTwoNics = {{"", "2"}, {"", "2"}};

// Bytes each fake device's queue pairs wrote while `fn` ran.
template <typename F>
std::vector<uint64_t> writtenDuring(F fn) {
  const uint64_t before[2] = {ib::fake::bytesWritten(0), ib::fake::bytesWritten(1)};
  fn();
  return {ib::fake::bytesWritten(0) - before[0], ib::fake::bytesWritten(1) - before[1]};
}

TEST(IbStripe, LargeMessageIsSplitEvenlyOverBothDevices) {
  TwoNics setup;
  Pair p = makePair(kTwoNics);
  ASSERT_EQ(p.c.size(), 2u);
  const ib::VerbsApi* api = ib::verbs(nullptr);
  ASSERT_NE(api, nullptr);
  for (int end = 0; end < 2; ++end) {
    ASSERT_EQ(ibConn(p.c[end]).rails(), 2);
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(std::string(api->get_device_name(
                    ibConn(p.c[end]).rail(r).qp()->context->device)),
                "fake_" + std::to_string(r));
  }
  constexpr size_t kBytes = size_t{2} << 20;
  const std::vector<uint64_t> moved =
      writtenDuring([&] { expectTransfer(*p.c[0], *p.c[1], randomBytes(kBytes), 5); });
  for (int d = 0; d < 2; ++d) {
    // Half the message, and the receiver's advertisement of that half.
    EXPECT_GE(moved[d], kBytes / 2) << "device " << d;
    EXPECT_LT(moved[d], kBytes / 2 + 4096) << "device " << d;
  }
  EXPECT_EQ(p.c[0]->stats().bytesSent, kBytes) << "counted once, not per rail";
  EXPECT_EQ(p.c[1]->stats().bytesRecv, kBytes);
}

TEST(IbStripe, SmallMessagesGoWholeOnTheRailsInTurn) {
  TwoNics setup;
  Pair p = makePair(kTwoNics);
  ASSERT_EQ(p.c.size(), 2u);
  for (int k = 0; k < 4; ++k) {
    const std::vector<uint64_t> moved =
        writtenDuring([&] { expectTransfer(*p.c[0], *p.c[1], randomBytes(1000), k); });
    const int rail = k % 2;
    EXPECT_GE(moved[rail], 1000u) << "message " << k;
    EXPECT_LT(moved[rail], 1000u + 4096) << "message " << k;
    EXPECT_EQ(moved[1 - rail], 0u) << "message " << k << " touched the other NIC";
  }
  EXPECT_EQ(p.c[1]->stats().bytesRecv, 4000u);
}

// Sizes below and far above the stripe threshold, in both directions at once, through 512-byte
// writes: a message just below the threshold goes whole on one rail in more writes than a
// send queue holds, so the tiny message after it, on the other rail, arrives first; a striped
// message's pieces then arrive interleaved with it.
TEST(IbStripe, MixedSizesKeepTheirOrderBothWaysAndCompleteInOrder) {
  TwoNics setup(512);
  const int rnrBefore = ib::fake::rnrViolations();
  Pair p = makePair(kTwoNics);
  ASSERT_EQ(p.c.size(), 2u);
  constexpr int kCount = 24;
  struct Flow {
    Connection* from;
    Connection* to;
    std::vector<std::vector<uint8_t>> out, in;
    std::vector<Op> sends, recvs;
  };
  Flow flows[2] = {{p.c[0].get(), p.c[1].get(), {}, {}, {}, {}},
                   {p.c[1].get(), p.c[0].get(), {}, {}, {}, {}}};
  for (int f = 0; f < 2; ++f)
    for (int i = 0; i < kCount; ++i) {
      const size_t n = i % 4 == 0   ? static_cast<size_t>(60000 + 97 * i + f)
                       : i % 4 == 2 ? static_cast<size_t>(300000 + 977 * i + f)
                                    : static_cast<size_t>(37 * i * (f + 1));
      flows[f].out.push_back(randomBytes(n));
      flows[f].in.emplace_back(n, kPoison);
    }
  for (int i = 0; i < kCount; ++i)
    for (Flow& fl : flows) {
      const Tag tag = static_cast<Tag>(1000 + i);
      auto s = fl.from->postSend(fl.out[i].data(), fl.out[i].size(), tag);
      auto r = fl.to->postRecv(fl.in[i].data(), fl.in[i].size(), tag);
      ASSERT_TRUE(s.ok() && r.ok());
      fl.sends.push_back(*s);
      fl.recvs.push_back(*r);
    }
  // Drive both ends; after every round, what has completed is a prefix of what was posted.
  const auto until = std::chrono::steady_clock::now() + seconds(kOpSeconds);
  bool all = false;
  while (!all && std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(p.c[0]->progress().ok());
    ASSERT_TRUE(p.c[1]->progress().ok());
    all = true;
    for (Flow& fl : flows)
      for (auto [conn, ops] : {std::pair{fl.from, &fl.sends}, std::pair{fl.to, &fl.recvs}}) {
        bool gap = false;
        for (int i = 0; i < kCount; ++i) {
          bool done = false;
          ASSERT_TRUE(conn->check((*ops)[i], &done).ok());
          ASSERT_FALSE(done && gap) << "op " << i << " completed before an earlier one";
          gap = gap || !done;
        }
        all = all && !gap;
      }
  }
  ASSERT_TRUE(all) << "not every message arrived within " << kOpSeconds << " s";
  for (int f = 0; f < 2; ++f)
    for (int i = 0; i < kCount; ++i)
      EXPECT_TRUE(flows[f].in[i] == flows[f].out[i]) << "direction " << f << ", message " << i;
  EXPECT_EQ(ib::fake::rnrViolations(), rnrBefore) << "a write found no receive posted";
}

// pollInfo()'s one fd stands for both rails' completion channels.
TEST(IbStripe, EitherRailsCompletionWakesASleeper) {
  TwoNics setup;
  Pair p = makePair(kTwoNics);
  ASSERT_EQ(p.c.size(), 2u);
  int fd = -1;
  short events = 0;
  p.c[1]->pollInfo(&fd, &events);
  ASSERT_GE(fd, 0);
  for (int k = 0; k < 2; ++k) {  // message k goes on rail k
    SCOPED_TRACE("rail " + std::to_string(k));
    uint64_t x = 0x1234 + static_cast<uint64_t>(k), y = 0;
    auto r = p.c[1]->postRecv(&y, 8, 4);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(p.c[1]->progress().ok());  // advertises
    ASSERT_TRUE(p.c[1]->progress().ok());  // takes the advertisement's completion, re-arms
    pollfd pfd{fd, events, 0};
    EXPECT_EQ(::poll(&pfd, 1, 0), 0) << "readable before anything arrived";
    auto s = p.c[0]->postSend(&x, 8, 4);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(p.c[0]->progress().ok());
    pfd.revents = 0;
    EXPECT_EQ(::poll(&pfd, 1, 0), 1) << "the data's completion did not wake the fd";
    ASSERT_TRUE(driveAll({{p.c[0].get(), *s}, {p.c[1].get(), *r}}).ok());
    EXPECT_EQ(y, x);
  }
}

TEST(IbStripe, RailCountMismatchFailsBothEndsNamingBoth) {
  TwoNics setup;
  Attempt a = tryPair({{"", "2"}, {"", "1"}});
  ASSERT_EQ(a.c.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(a.c[r].ok()) << "rank " << r;
    const Status& s = a.c[r].status();
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.toString();
    for (const char* part : {"rank 0", "rank 1", "over 2", "over 1", "CHORUS_IB_NICS_PER_RANK"})
      EXPECT_NE(s.message().find(part), std::string::npos) << part << " in " << s.message();
  }
}

TEST(IbStripe, AFailedRailFailsTheWholeConnection) {
  TwoNics setup;
  Pair p = makePair(kTwoNics);
  ASSERT_EQ(p.c.size(), 2u);
  // Rank 1's second NIC drops off the fabric: rank 0's writes on rail 1 fail.
  ib::fake::unplug(ibConn(p.c[1]).rail(1).qp()->qp_num);
  const std::vector<uint8_t> v = randomBytes(256 << 10);
  std::vector<uint8_t> got(v.size(), kPoison);
  auto r = p.c[1]->postRecv(got.data(), got.size(), 3);
  auto s = p.c[0]->postSend(v.data(), v.size(), 3);
  ASSERT_TRUE(r.ok() && s.ok());
  Status ss = outcome(*p.c[0], s, kPromptSeconds, {p.c[1].get()});
  EXPECT_EQ(ss.code(), Code::kRemoteError) << ss.toString();
  for (const char* part : {"rank 1", "fake_1", "retry count exceeded"})
    EXPECT_NE(ss.message().find(part), std::string::npos) << part << " in " << ss.message();
  EXPECT_EQ(ibConn(p.c[0]).rail(0).qp()->state, IBV_QPS_ERR) << "the healthy rail fails too";
  uint64_t x = 1;
  for (int k = 0; k < 2; ++k)  // whichever rail a small message would take
    EXPECT_EQ(outcome(*p.c[0], p.c[0]->postSend(&x, 8, 4)).message(), ss.message());
  EXPECT_EQ(p.c[0]->stats().bytesSent, 0u);
}

TEST(IbStripe, MessagesCutDifferentlyAreAMismatchNotAWrongWrite) {
  TwoNics setup;
  Pair p = makePair(kTwoNics);
  ASSERT_EQ(p.c.size(), 2u);
  // 120000 bytes go in two pieces, 60000 whole on rail 0: rail 0 sees pieces of different
  // messages whose first pieces are of similar sizes.
  const std::vector<uint8_t> v = randomBytes(120000);
  std::vector<uint8_t> got(60000, kPoison), next(60000, kPoison);
  auto s = p.c[0]->postSend(v.data(), v.size(), 12);
  auto r = p.c[1]->postRecv(got.data(), got.size(), 12);
  auto r2 = p.c[1]->postRecv(next.data(), next.size(), 12);
  ASSERT_TRUE(s.ok() && r.ok() && r2.ok());
  Status rs = outcome(*p.c[1], r, kPromptSeconds, {p.c[0].get()});
  EXPECT_EQ(rs.code(), Code::kInvalidUsage) << rs.toString();
  for (const char* part : {"rank 0", "rank 1", "120000 bytes", "60000 bytes"})
    EXPECT_NE(rs.message().find(part), std::string::npos) << part << " in " << rs.message();
  EXPECT_EQ(outcome(*p.c[0], s, kPromptSeconds).code(), Code::kInvalidUsage);
  EXPECT_EQ(outcome(*p.c[1], r2, kPromptSeconds).code(), Code::kInvalidUsage);
  for (const auto* buf : {&got, &next})
    EXPECT_TRUE(std::all_of(buf->begin(), buf->end(), [](uint8_t b) { return b == kPoison; }));
}

TEST(IbStripe, CancelReachesThePeerOnEveryRail) {
  TwoNics setup;
  Pair p = makePair(kTwoNics);
  ASSERT_EQ(p.c.size(), 2u);
  uint64_t a = 0, b = 0;
  auto onRail0 = p.c[0]->postRecv(&a, 8, 1);
  auto onRail1 = p.c[0]->postRecv(&b, 8, 2);
  ASSERT_TRUE(onRail0.ok() && onRail1.ok());
  ASSERT_TRUE(p.c[1]->cancel(timeoutError("rank 1 gave up")).ok());
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(ibConn(p.c[1]).rail(r).qp()->state, IBV_QPS_ERR) << "rail " << r;
  for (const auto* op : {&onRail0, &onRail1}) {
    Status peer = outcome(*p.c[0], *op, kPromptSeconds);
    EXPECT_EQ(peer.code(), Code::kRemoteError) << peer.toString();
    EXPECT_NE(peer.message().find("rank 1 gave up"), std::string::npos) << peer.message();
  }
}

TEST(IbStripe, CloseCountsMessagesNotPiecesAndPeerGoneReachesEveryRail) {
  TwoNics setup;
  Pair p = makePair(kTwoNics);
  ASSERT_EQ(p.c.size(), 2u);
  expectTransfer(*p.c[0], *p.c[1], randomBytes(200000), 1);  // two pieces
  expectTransfer(*p.c[0], *p.c[1], randomBytes(100), 2);
  expectTransfer(*p.c[0], *p.c[1], randomBytes(100), 3);
  std::vector<uint8_t> more(200000, kPoison);
  auto r = p.c[1]->postRecv(more.data(), more.size(), 4);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(p.c[1]->progress().ok());
  p.c[0].reset();  // CLOSE on each rail
  Status st = outcome(*p.c[1], r, kPromptSeconds);
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.toString();
  EXPECT_NE(st.message().find("after sending 3 messages"), std::string::npos) << st.message();

  Pair q = makePair(kTwoNics);
  ASSERT_EQ(q.c.size(), 2u);
  uint64_t x = 0, y = 0;
  auto r1 = q.c[1]->postRecv(&x, 8, 1);
  auto r2 = q.c[1]->postRecv(&y, 8, 2);
  ASSERT_TRUE(r1.ok() && r2.ok());
  const Status why = remoteError("rank 0 (pid 4242) is gone: killed by signal 9");
  q.c[1]->peerGone(why);
  EXPECT_EQ(outcome(*q.c[1], r1).message(), why.message());
  EXPECT_EQ(outcome(*q.c[1], r2).message(), why.message());
}

// ---- Communicators over the fake ---------------------------------------------------------------

// One rank of a communicator over ibverbs alone: all-reduce, all-gather, broadcast,
// reduce-scatter, all-to-all and barrier at a few sizes, values checked.
std::string runRank(chorusUniqueId id, int rank, int n) {
  chorusComm_t comm = nullptr;
  if (chorusCommInitRank(&comm, n, id, rank) != chorusSuccess)
    return std::string("rank ") + std::to_string(rank) + ": init: " + chorusGetLastError(nullptr);
  std::string failure;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok && failure.empty()) failure = "rank " + std::to_string(rank) + ": " + what;
  };
  for (size_t count : {size_t{1}, size_t{1000}, size_t{200000}}) {
    const std::string at = " of " + std::to_string(count) + ": ";
    std::vector<int32_t> in(count), out(count, -7);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(i * 3 + rank);
    expect(chorusAllReduce(in.data(), out.data(), count, chorusInt32, chorusSum, comm,
                           nullptr) == chorusSuccess,
           "allreduce" + at + chorusGetLastError(nullptr));
    for (size_t i = 0; i < count; ++i)
      if (out[i] != static_cast<int32_t>(n * i * 3 + n * (n - 1) / 2)) {
        expect(false, "allreduce" + at + "element " + std::to_string(i));
        break;
      }
    std::vector<int32_t> all(count * static_cast<size_t>(n), -7);
    expect(chorusAllGather(in.data(), all.data(), count, chorusInt32, comm, nullptr) ==
               chorusSuccess,
           "allgather" + at + chorusGetLastError(nullptr));
    for (int r = 0; r < n; ++r)
      if (all[static_cast<size_t>(r) * count + count - 1] !=
          static_cast<int32_t>((count - 1) * 3 + static_cast<size_t>(r)))
        expect(false, "allgather" + at + "block " + std::to_string(r));
    std::vector<int32_t> b(count, rank == 1 ? 42 : 0);
    expect(chorusBroadcast(b.data(), b.data(), count, chorusInt32, 1, comm, nullptr) ==
               chorusSuccess,
           "broadcast" + at + chorusGetLastError(nullptr));
    expect(b.front() == 42 && b.back() == 42, "broadcast" + at + "value");
    // Block j of every rank's input goes to rank j: reduce-scattered and all-to-all'd.
    std::vector<int32_t> blocks(count * static_cast<size_t>(n));
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(i + 10 * rank);
    std::vector<int32_t> mine(count, -7), exchanged(blocks.size(), -7);
    expect(chorusReduceScatter(blocks.data(), mine.data(), count, chorusInt32, chorusSum, comm,
                               nullptr) == chorusSuccess,
           "reducescatter" + at + chorusGetLastError(nullptr));
    const size_t first = static_cast<size_t>(rank) * count;
    expect(mine[0] == static_cast<int32_t>(n * first + 10 * n * (n - 1) / 2),
           "reducescatter" + at + "value");
    expect(chorusAllToAll(blocks.data(), exchanged.data(), count, chorusInt32, comm, nullptr) ==
               chorusSuccess,
           "alltoall" + at + chorusGetLastError(nullptr));
    for (int r = 0; r < n; ++r)
      expect(exchanged[static_cast<size_t>(r) * count] == static_cast<int32_t>(first + 10 * r),
             "alltoall" + at + "block from rank " + std::to_string(r));
    expect(chorusBarrier(comm, nullptr) == chorusSuccess,
           "barrier: " + std::string(chorusGetLastError(nullptr)));
  }
  chorusCommDestroy(comm);
  return failure;
}

// Three ranks (not a power of two) as threads of this process: with one NIC per rank, the
// tuner's picks and then each message-based algorithm forced in turn; with two NICs per rank
// over two fake devices (messages from 64 KiB striped, the ring schedules' 256 KiB chunks
// included), the tuner's picks and the ring family, to keep the case cheap.
TEST(IbCommunicator, CollectivesOverTheFakeWithRanksAsThreads) {
  ScopedEnv only("CHORUS_TRANSPORT", "ibverbs");
  ScopedEnv min("CHORUS_IB_STRIPE_MIN_BYTES", "64K");
  ib::fake::Options o;
  o.devices = 2;
  ScopedFake fake(o);
  constexpr int kRanks = 3;
  const std::vector<const char*> algos = {
      "", "allreduce:ring,allgather:ring,broadcast:chain,reducescatter:ring",
      "allreduce:recursive_doubling,broadcast:binomial", "allreduce:rabenseifner",
      "allreduce:tree,alltoall:pairwise", "allreduce:oneshot"};
  for (const char* nics : {"1", "2"}) {
    ScopedEnv rails("CHORUS_IB_NICS_PER_RANK", nics);
    const size_t count = std::string(nics) == "1" ? algos.size() : 2;
    const uint64_t firstBefore = ib::fake::bytesWritten(0);
    const uint64_t secondBefore = ib::fake::bytesWritten(1);
    for (size_t a = 0; a < count; ++a) {
      SCOPED_TRACE(std::string("CHORUS_IB_NICS_PER_RANK=") + nics + ", CHORUS_ALGO=" + algos[a]);
      ScopedEnv forced("CHORUS_ALGO", algos[a]);
      chorusUniqueId id{};
      ASSERT_EQ(chorusGetUniqueId(&id), chorusSuccess);
      std::vector<std::future<std::string>> ranks;
      for (int r = 0; r < kRanks; ++r)
        ranks.push_back(onThread([id, r] { return runRank(id, r, kRanks); }));
      for (int r = 0; r < kRanks; ++r) {
        auto failure =
            joinWithin(ranks[r], std::chrono::seconds(60), "rank " + std::to_string(r));
        ASSERT_TRUE(failure.has_value());
        EXPECT_EQ(*failure, "");
      }
    }
    const uint64_t first = ib::fake::bytesWritten(0) - firstBefore;
    const uint64_t second = ib::fake::bytesWritten(1) - secondBefore;
    if (std::string(nics) == "1") {
      EXPECT_EQ(second, 0u) << "one NIC per rank: every rank on the first device";
    } else {  // even pieces, small messages in turn: close to half each
      EXPECT_GT(second, first * 4 / 5) << first << " bytes on the first device";
      EXPECT_GT(first, second * 4 / 5) << second << " bytes on the second device";
    }
  }
}

}  // namespace
}  // namespace chorus::conformance
