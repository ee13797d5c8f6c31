#include "trainer.h"

#include "memory.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace train {
namespace fs = std::filesystem;
using memory::Tag;
using memory::TagGuard;

namespace {
// Element `offset` of a flat tensor, for the C API.
void* at(const torch::Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data_ptr()) + offset * t.element_size();
}
}  // namespace

const char* modeName(Mode m) {
  switch (m) {
    case Mode::kDp: return "dp";
    case Mode::kZero1: return "zero1";
    case Mode::kZero2: return "zero2";
    case Mode::kZero3: return "zero3";
    case Mode::kZeroPP: return "zeropp";
  }
  return "?";
}

Partition::Partition(const ModelLayout& layout, int parts_, int part_)
    : parts(parts_), part(part_) {
  for (int u = 0; u < layout.numUnits(); ++u) {
    int64_t S_u = layout.unitSize[u];
    int64_t s_u = (S_u + parts - 1) / parts;
    S.push_back(S_u);
    s.push_back(s_u);
    P.push_back(s_u * parts);
    F.push_back(fullSize);
    H.push_back(shardSize);
    fullSize += s_u * parts;
    shardSize += s_u;
  }
}

Trainer::Trainer(const ModelConfig& model, const TrainConfig& cfg, const Corpus& corpus,
                 Comm& comm)
    : model_(model),
      cfg_(cfg),
      corpus_(corpus),
      comm_(comm),
      layout_(makeLayout(model)),
      part_(layout_, cfg.mode == Mode::kDp ? 1 : comm.size(),
            cfg.mode == Mode::kDp ? 0 : comm.rank()),
      W_(comm.size()),
      rank_(comm.rank()),
      dt_(cfg.bf16 ? torch::kBFloat16 : torch::kFloat32),
      cdt_(cfg.bf16 ? chorusBfloat16 : chorusFloat32) {
  if (cfg_.batch % (int64_t(W_) * cfg_.accum) != 0) {
    throw std::invalid_argument("--batch " + std::to_string(cfg_.batch) +
                                " is not a multiple of world size " + std::to_string(W_) +
                                " x --accum " + std::to_string(cfg_.accum));
  }
  localBatch_ = cfg_.batch / W_;
  microBatch_ = localBatch_ / cfg_.accum;
  if (corpus_.heldOut().size() < size_t(model_.context) + 2 ||
      corpus_.train().size() < size_t(model_.context) + 2) {
    throw std::invalid_argument("--context " + std::to_string(model_.context) +
                                " is longer than the held-out text");
  }
  inflight_ = std::make_unique<InFlight>(comm_);
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  auto cdt = torch::TensorOptions().dtype(dt_);
  {
    TagGuard tag(Tag::kParams);
    if (fullReplica()) fullParam_ = torch::zeros({part_.fullSize}, cdt);
    if (sharded()) shardParam_ = torch::zeros({part_.shardSize}, cdt);
  }
  {
    TagGuard tag(Tag::kGrads);
    if (cfg_.mode == Mode::kDp || cfg_.mode == Mode::kZero1) {
      fullGrad_ = torch::zeros({part_.fullSize}, cdt);
    }
    if (shardedGrads()) shardGrad_ = torch::zeros({part_.shardSize}, cdt);
  }
  TagGuard tag(Tag::kOptimizer);
  if (cfg_.bf16) master_ = torch::zeros({part_.shardSize}, f32);
  m_ = torch::zeros({part_.shardSize}, f32);
  v_ = torch::zeros({part_.shardSize}, f32);
  gatherReq_.assign(layout_.numUnits(), nullptr);
  gatherBuf_.resize(layout_.numUnits());
  if (fullReplica()) installHooks();
  if (cfg_.mode == Mode::kZeroPP) {
    comm_.splitHost(host_);
    const int L = host_.size();
    for (int u = 0; u < layout_.numUnits(); ++u) {
      const int64_t s = part_.s[u];
      s2_.push_back((part_.S[u] + L - 1) / L);
      // Groups never longer than a rank's block (the collectives require it); even for int4.
      chorusQuantConfig_t w = CHORUS_QUANT_CONFIG_INIT;
      w.groupSize = size_t(std::min<int64_t>(256, s));
      qw_.push_back(w);
      chorusQuantConfig_t g = CHORUS_QUANT_CONFIG_INIT;
      g.bits = 4;
      g.groupSize = size_t(std::max<int64_t>(2, std::min<int64_t>(128, s) & ~int64_t(1)));
      qg_.push_back(g);
    }
    secondary_.resize(layout_.numUnits());
    residual_.resize(layout_.numUnits());
  }
}

Trainer::~Trainer() {
  bool pending = inflight_->size() > 0;
  for (auto& r : gatherReq_) pending = pending || r != nullptr;
  if (pending) {
    // Only on an error path: tell the peers at once instead of waiting for operations that may
    // never complete, and keep their buffers alive (the process is about to exit).
    host_.abort();
    comm_.abort();
    inflight_->abandon();
    for (auto& b : gatherBuf_) new torch::Tensor(b);  // deliberately leaked
    return;
  }
}

torch::Tensor Trainer::paramShard(int u) const {
  if (sharded()) return shardParam_.narrow(0, part_.H[u], part_.s[u]);
  return fullParam_.narrow(0, part_.F[u] + part_.part * part_.s[u], part_.s[u]);
}

torch::Tensor Trainer::gradShard(int u) const {
  if (shardedGrads()) return shardGrad_.narrow(0, part_.H[u], part_.s[u]);
  return fullGrad_.narrow(0, part_.F[u] + part_.part * part_.s[u], part_.s[u]);
}

torch::Tensor Trainer::masterShard(int u) const {
  if (master_.defined()) return master_.narrow(0, part_.H[u], part_.s[u]);
  return paramShard(u);
}

Trainer::Footprint Trainer::footprint() const {
  auto bytes = [](const torch::Tensor& t) {
    return t.defined() ? t.numel() * int64_t(t.element_size()) : int64_t(0);
  };
  Footprint f;
  f.params = bytes(fullParam_) + bytes(shardParam_);
  f.grads = bytes(fullGrad_) + bytes(shardGrad_);
  f.optimizer = bytes(master_) + bytes(m_) + bytes(v_);
  return f;
}

void Trainer::setUnit(int u, const float* logical) {
  if (fullReplica()) {
    torch::Tensor src = torch::from_blob(const_cast<float*>(logical), {part_.S[u]},
                                         torch::kFloat32);
    fullParam_.narrow(0, part_.F[u], part_.S[u]).copy_(src);
  }
  float* mp = master(u);
  for (int64_t j = 0; j < part_.s[u]; ++j) {
    const int64_t e = part_.part * part_.s[u] + j;  // logical element; padding stays zero
    mp[j] = e < part_.S[u] ? logical[e] : 0.f;
  }
  if (master_.defined()) paramShard(u).copy_(masterShard(u));  // rounded to bf16
}

void Trainer::initFromSeed() {
  for (int u = 0; u < layout_.numUnits(); ++u) {
    std::vector<float> init = initUnit(layout_, u, cfg_.seed);
    setUnit(u, init.data());
  }
  m_.zero_();
  v_.zero_();
  adamStep_ = 0;
}

// ---- Data --------------------------------------------------------------------------------

Trainer::Batch Trainer::makeBatch(int64_t step, int64_t micro) {
  const int64_t T = model_.context, n = microBatch_;
  const auto& text = corpus_.train();
  const uint64_t span = text.size() - T - 1;
  Batch b;
  b.idx = torch::empty({n, T}, torch::kInt64);
  b.targets = torch::empty({n, T}, torch::kInt64);
  auto idx = b.idx.accessor<int64_t, 2>();
  auto tgt = b.targets.accessor<int64_t, 2>();
  std::vector<torch::Tensor> masks;
  for (int64_t j = 0; j < n; ++j) {
    // The global index of the sample fixes its text and its dropout, whoever holds it.
    const int64_t g = rank_ * localBatch_ + micro * microBatch_ + j;
    const uint64_t pos = mixSeed(cfg_.seed, 0xda7a, uint64_t(step), uint64_t(g)) % span;
    for (int64_t t = 0; t < T; ++t) {
      idx[j][t] = text[pos + t];
      tgt[j][t] = text[pos + t + 1];
    }
    if (model_.dropout > 0) masks.push_back(sampleMasks(model_, cfg_.seed, step, g));
  }
  if (!masks.empty()) b.masks = torch::stack(masks).to(dt_);
  // Each rank's micro-batch losses sum to its local mean; the average over ranks is the global
  // mean, whatever the world size.
  b.lossScale = 1.0 / double(localBatch_ * T);
  return b;
}

// ---- dp / zero1 / zero2: one autograd graph, communication launched from its hooks --------

void Trainer::installHooks() {
  readyParams_.assign(layout_.numUnits(), 0);
  unitReady_.assign(layout_.numUnits(), false);
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < layout_.params.size(); ++i) {
    const ParamSpec& p = layout_.params[i];
    torch::Tensor leaf = fullParam_.narrow(0, part_.F[p.unit] + p.offset, p.numel)
                             .view(p.shape)
                             .detach()
                             .requires_grad_(true);
    // The gradient accumulator of a leaf runs once per backward, after it has added the new
    // gradient into .grad; its post hook is the "gradient ready" signal. The accumulator must be
    // kept alive, or autograd makes a new one (without the hook) at the next forward.
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(leaf);
    const int index = static_cast<int>(i);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, index](const torch::autograd::variable_list& outputs,
                      const torch::autograd::variable_list&) {
          onParamGradReady(index);
          return outputs;
        }));
    accumulators_.push_back(std::move(acc));
    leaves_.push_back(leaf);
  }
}

void Trainer::onParamGradReady(int param) {
  const int u = layout_.params[param].unit;
  if (++readyParams_[u] == int(layout_.unitParams[u].size())) {
    unitReady_[u] = true;
    launchReadyUnits();
  }
}

// Units are launched in descending order only (the order backward usually finishes them), so
// every rank starts the same collectives in the same order even if autograd's order differed.
void Trainer::launchReadyUnits() {
  while (nextLaunch_ >= 0 && unitReady_[nextLaunch_]) launchUnit(nextLaunch_--);
}

void Trainer::launchUnit(int u) {
  const int64_t F = part_.F[u], P = part_.P[u], s = part_.s[u];
  const std::string what = std::string(modeName(cfg_.mode)) + " unit " + std::to_string(u);
  if (cfg_.mode == Mode::kDp) {
    if (!lastMicro_) return;  // accumulate locally; communicate once per step
    inflight_->push(comm_.iAllReduce(at(fullGrad_, F), P, cdt_, chorusAvg), what);
  } else if (cfg_.mode == Mode::kZero1) {
    if (!lastMicro_) return;
    // In place: this rank's block of the unit receives the average of everyone's block.
    inflight_->push(comm_.iReduceScatter(at(fullGrad_, F), at(fullGrad_, F + part_.part * s), s,
                                         cdt_, chorusAvg),
                    what);
  } else {  // zero2: every micro-batch; the unit's full gradient lives only until it is sent
    std::vector<torch::Tensor> grads;
    for (int i : layout_.unitParams[u]) {
      grads.push_back(leaves_[i].grad());
      leaves_[i].mutable_grad().reset();
    }
    reduceScatterUnit(u, grads);
  }
}

// Packs a unit's gradients into one padded buffer and reduce-scatters it into a temporary
// shard, added into the shard gradient once complete. At most two units are in flight, so the
// gradients held at once are bounded by two units, never the whole model.
void Trainer::reduceScatterUnit(int u, const std::vector<torch::Tensor>& grads) {
  const int64_t P = part_.P[u], s = part_.s[u];
  for (const auto& g : grads) memory::retag(g, Tag::kGrads);  // made by autograd
  TagGuard tag(Tag::kGrads);
  torch::Tensor send = torch::zeros({P}, dt_);
  const auto& ids = layout_.unitParams[u];
  for (size_t k = 0; k < ids.size(); ++k) {
    const ParamSpec& p = layout_.params[ids[k]];
    if (!grads[k].defined()) {
      throw std::runtime_error("rank " + std::to_string(rank_) + ": no gradient for " + p.name);
    }
    send.narrow(0, p.offset, p.numel).copy_(grads[k].reshape({-1}));
  }
  torch::Tensor recv = torch::empty({s}, dt_);
  while (inflight_->size() >= 2) inflight_->waitOldest();
  chorusRequest_t req = nullptr;
  if (cfg_.mode == Mode::kZeroPP) {
    if (cfg_.errorFeedback) addErrorFeedback(u, send);
    req = comm_.iReduceScatterQuantized(send.data_ptr(), recv.data_ptr(), s, cdt_, chorusAvg,
                                        &qg_[u]);
  } else {
    req = comm_.iReduceScatter(send.data_ptr(), recv.data_ptr(), s, cdt_, chorusAvg);
  }
  torch::Tensor dst = gradShard(u);
  inflight_->push(req, std::string(modeName(cfg_.mode)) + " reduce-scatter unit " +
                           std::to_string(u),
                  [send, recv, dst]() mutable {
                    dst.add_(recv);
                    send = torch::Tensor();
                  });
}

// Error feedback for qgZ: what this rank's int4 encoding of its outgoing blocks loses is added
// to the next step's gradient. Each destination block is encoded the way the reduce-scatter's
// first hop encodes it (same config, groups starting at the block), so the residual is that
// hop's error as this rank can see it; the second hop's (on the summed values) is not kept.
void Trainer::addErrorFeedback(int u, torch::Tensor& send) {
  const int64_t s = part_.s[u];
  if (!residual_[u].defined()) residual_[u] = torch::zeros({part_.P[u]}, dt_);
  send.add_(residual_[u]);
  const size_t qbytes = [&] {
    size_t b = 0;
    comm_.check(chorusQuantizedSize(size_t(s), &qg_[u], &b), "chorusQuantizedSize");
    return b;
  }();
  std::vector<unsigned char> q(qbytes);
  torch::Tensor decoded = torch::empty({s}, dt_);
  for (int r = 0; r < W_; ++r) {
    comm_.check(chorusQuantize(at(send, r * s), q.data(), size_t(s), cdt_, &qg_[u], nullptr),
                "chorusQuantize");
    comm_.check(chorusDequantize(q.data(), decoded.data_ptr(), size_t(s), cdt_, &qg_[u],
                                 nullptr),
                "chorusDequantize");
    torch::Tensor res = residual_[u].narrow(0, r * s, s);
    torch::sub_out(res, send.narrow(0, r * s, s), decoded);
  }
}

double Trainer::microStepReplicated(const Batch& b) {
  std::fill(readyParams_.begin(), readyParams_.end(), 0);
  std::fill(unitReady_.begin(), unitReady_.end(), false);
  nextLaunch_ = layout_.numUnits() - 1;
  torch::Tensor x = b.idx;
  for (int u = 0; u < layout_.numUnits(); ++u) {
    std::vector<torch::Tensor> p;
    for (int i : layout_.unitParams[u]) p.push_back(leaves_[i]);
    const bool last = u == layout_.numUnits() - 1;
    x = unitForward(model_, u, x, p, b.masks, last ? b.targets : torch::Tensor(), b.lossScale);
  }
  const double loss = x.item<double>();
  memory::setPhase(memory::Phase::kBackward);
  x.backward();
  if (nextLaunch_ != -1) {
    throw std::runtime_error("rank " + std::to_string(rank_) + ": backward left unit " +
                             std::to_string(nextLaunch_) + " without gradients");
  }
  return loss;
}

// ---- zero3: parameters gathered per unit, freed after use, recomputed for backward ---------

void Trainer::startGather(int u, Gather kind) {
  TagGuard tag(Tag::kParams);
  if (cfg_.mode == Mode::kZeroPP && kind == Gather::kBackward) {
    // hpZ: the unit comes back from this host's ranks only (L-way secondary shards).
    const int64_t s2 = s2_[u];
    gatherBuf_[u] = torch::empty({s2 * host_.size()}, dt_);
    gatherReq_[u] = host_.iAllGather(secondary_[u].data_ptr(), gatherBuf_[u].data_ptr(), s2, cdt_);
    return;
  }
  gatherBuf_[u] = torch::empty({part_.P[u]}, dt_);
  void* mine = paramShard(u).data_ptr();
  if (cfg_.mode == Mode::kZeroPP && kind == Gather::kForward) {  // qwZ: int8 weights
    gatherReq_[u] = comm_.iAllGatherQuantized(mine, gatherBuf_[u].data_ptr(), part_.s[u], cdt_,
                                              &qw_[u]);
    return;
  }
  gatherReq_[u] = comm_.iAllGather(mine, gatherBuf_[u].data_ptr(), part_.s[u], cdt_);
}

torch::Tensor Trainer::finishGather(int u) {
  comm_.wait(gatherReq_[u], std::string(modeName(cfg_.mode)) + " all-gather unit " +
                                std::to_string(u));
  torch::Tensor buf = std::move(gatherBuf_[u]);
  gatherBuf_[u] = torch::Tensor();
  return buf;
}

// Forward runs unit by unit without autograd, keeping only each unit's input; backward gathers
// each unit again, recomputes its forward with autograd (same dropout masks) and takes the
// gradients of its parameters and its input. The head unit's forward is done once, in backward.
double Trainer::microStepZero3(const Batch& b) {
  const int U = layout_.numUnits();
  std::vector<torch::Tensor> inputs(U);
  torch::Tensor x = b.idx;
  startGather(0, Gather::kForward);
  for (int u = 0; u < U - 1; ++u) {
    torch::Tensor buf = finishGather(u);
    startGather(u + 1, Gather::kForward);  // prefetch (u + 1 == U - 1: the head, for backward)
    if (cfg_.mode == Mode::kZeroPP) {
      // hpZ: keep this host's slice of the (int8-decoded) unit for backward.
      TagGuard tag(Tag::kParams);
      const int64_t s2 = s2_[u], l = host_.rank();
      secondary_[u] = torch::zeros({s2}, dt_);
      const int64_t n = std::min<int64_t>(s2, part_.S[u] - l * s2);
      if (n > 0) secondary_[u].narrow(0, 0, n).copy_(buf.narrow(0, l * s2, n));
    }
    inputs[u] = x;
    torch::NoGradGuard noGrad;
    x = unitForward(model_, u, x, unitViews(layout_, u, buf), b.masks, {}, 0);
  }
  inputs[U - 1] = x;
  memory::setPhase(memory::Phase::kBackward);
  double loss = 0;
  torch::Tensor gradOut;
  for (int u = U - 1; u >= 0; --u) {
    torch::Tensor buf = finishGather(u);
    if (u > 0) startGather(u - 1, Gather::kBackward);
    if (!secondary_.empty()) secondary_[u] = torch::Tensor();  // hpZ copy no longer needed
    std::vector<torch::Tensor> wrt;
    for (auto& t : unitViews(layout_, u, buf)) wrt.push_back(t.detach().requires_grad_(true));
    std::vector<torch::Tensor> params = wrt;
    torch::Tensor xin = inputs[u];
    if (u > 0) {
      xin = xin.detach().requires_grad_(true);
      wrt.push_back(xin);
    }
    torch::Tensor out = unitForward(model_, u, xin, params, b.masks,
                                    u == U - 1 ? b.targets : torch::Tensor(), b.lossScale);
    if (u == U - 1) loss = out.item<double>();
    std::vector<torch::Tensor> grads = torch::autograd::grad(
        {out}, wrt, {u == U - 1 ? torch::Tensor() : gradOut}, false, false, false);
    if (u > 0) {
      gradOut = grads.back();
      grads.pop_back();
    }
    inputs[u] = torch::Tensor();
    reduceScatterUnit(u, grads);
  }
  return loss;
}

// ---- The step ------------------------------------------------------------------------------

StepResult Trainer::step(int64_t step) {
  if (fullGrad_.defined()) fullGrad_.zero_();
  if (shardGrad_.defined()) shardGrad_.zero_();
  if (cfg_.mode == Mode::kDp || cfg_.mode == Mode::kZero1) {
    // The gradient of each parameter is a view of the flat gradient buffer: autograd adds into
    // it in place (no .grad tensors of its own), and the buckets are slices of it.
    for (size_t i = 0; i < leaves_.size(); ++i) {
      const ParamSpec& p = layout_.params[i];
      leaves_[i].mutable_grad() =
          fullGrad_.narrow(0, part_.F[p.unit] + p.offset, p.numel).view(p.shape);
    }
  }
  double localLoss = 0;
  for (int64_t k = 0; k < cfg_.accum; ++k) {
    lastMicro_ = k == cfg_.accum - 1;
    Batch b = makeBatch(step, k);
    memory::setPhase(memory::Phase::kForward);
    localLoss += sharded() ? microStepZero3(b) : microStepReplicated(b);
    if (shardedGrads()) inflight_->drain();
  }
  inflight_->drain();
  memory::setPhase(memory::Phase::kOptimizer);
  if (step == 1 && (cfg_.mode == Mode::kDp || cfg_.mode == Mode::kZero1)) {
    for (size_t i = 0; i < leaves_.size(); ++i) {
      const ParamSpec& p = layout_.params[i];
      if (leaves_[i].grad().data_ptr() != at(fullGrad_, part_.F[p.unit] + p.offset)) {
        throw std::runtime_error("rank " + std::to_string(rank_) + ": autograd replaced the " +
                                 "gradient view of " + p.name + " (libtorch version?)");
      }
    }
  }
  // Global norm: each rank sums the squares of what it owns; dp owns everything (parts = 1), so
  // it contributes 1/W of its (identical) sum and the all-reduce returns the same total.
  double sumsq = 0;
  for (int u = 0; u < layout_.numUnits(); ++u) {
    torch::Tensor g32 = [&] {
      TagGuard tag(Tag::kGrads);
      return gradShard(u).to(torch::kFloat32);  // a copy only with bf16
    }();
    const float* g = g32.data_ptr<float>();
    for (int64_t j = 0; j < part_.s[u]; ++j) sumsq += double(g[j]) * g[j];
  }
  double vals[2] = {localLoss / W_, part_.parts == 1 ? sumsq / W_ : sumsq};
  comm_.allReduceDoubles(vals, 2);
  StepResult r;
  r.loss = vals[0];
  r.gradNorm = std::sqrt(vals[1]);
  double scale = 1.0;
  if (cfg_.clip > 0 && r.gradNorm > cfg_.clip) scale = cfg_.clip / (r.gradNorm + 1e-6);
  adamw(++adamStep_, scale);
  if (cfg_.mode == Mode::kZero1 || cfg_.mode == Mode::kZero2) {
    // Updated shards back to every rank, in place.
    for (int u = 0; u < layout_.numUnits(); ++u) {
      const int64_t F = part_.F[u];
      inflight_->push(comm_.iAllGather(at(fullParam_, F + part_.part * part_.s[u]),
                                       at(fullParam_, F), part_.s[u], cdt_),
                      "all-gather updated unit " + std::to_string(u));
    }
    inflight_->drain();
  }
  return r;
}

// AdamW over this rank's shard, identical in every mode: element-wise, so a shard's update is
// exactly the same arithmetic as the same elements of a full update.
void Trainer::adamw(int64_t t, double gradScale) {
  const float b1 = float(cfg_.beta1), b2 = float(cfg_.beta2), eps = float(cfg_.eps);
  const float lr = float(cfg_.lr), wd = float(cfg_.weightDecay), gs = float(gradScale);
  const float c1 = float(1.0 / (1.0 - std::pow(cfg_.beta1, double(t))));
  const float c2 = float(1.0 / (1.0 - std::pow(cfg_.beta2, double(t))));
  for (int u = 0; u < layout_.numUnits(); ++u) {
    float* p = master(u);
    torch::Tensor g32 = [&] {
      TagGuard tag(Tag::kGrads);
      return gradShard(u).to(torch::kFloat32);  // a copy only with bf16
    }();
    const float* g = g32.data_ptr<float>();
    float* m = stateM(u);
    float* v = stateV(u);
    for (int64_t j = 0; j < part_.s[u]; ++j) {
      const float gj = g[j] * gs;
      m[j] = b1 * m[j] + (1 - b1) * gj;
      v[j] = b2 * v[j] + (1 - b2) * gj * gj;
      const float update = (m[j] * c1) / (std::sqrt(v[j] * c2) + eps);
      p[j] -= lr * (update + wd * p[j]);
    }
    if (master_.defined()) paramShard(u).copy_(masterShard(u));  // rounded to bf16
  }
}

// ---- Evaluation, sampling, dumps -----------------------------------------------------------

// The fp32 master weights (with fp32, the parameters themselves).
torch::Tensor Trainer::fullParameters() {
  if (fullReplica() && !master_.defined()) return fullParam_;
  if (part_.parts == 1) return master_;
  torch::Tensor full = torch::empty({part_.fullSize}, torch::kFloat32);
  for (int u = 0; u < layout_.numUnits(); ++u) {
    inflight_->push(comm_.iAllGather(master(u), at(full, part_.F[u]), part_.s[u], chorusFloat32),
                    "all-gather unit " + std::to_string(u));
  }
  inflight_->drain();
  return full;
}

double Trainer::heldOutLoss() {
  memory::setPhase(memory::Phase::kEval);
  torch::NoGradGuard noGrad;
  const int64_t T = model_.context;
  const auto& text = corpus_.heldOut();
  const int64_t K = std::max<int64_t>(W_, cfg_.evalSamples - cfg_.evalSamples % W_);
  const int64_t per = K / W_;
  torch::Tensor idx = torch::empty({per, T}, torch::kInt64), tgt = idx.clone();
  auto ia = idx.accessor<int64_t, 2>(), ta = tgt.accessor<int64_t, 2>();
  for (int64_t j = 0; j < per; ++j) {
    const int64_t w = rank_ * per + j;
    const uint64_t pos = uint64_t(w) * (text.size() - T - 1) / uint64_t(K);
    for (int64_t t = 0; t < T; ++t) {
      ia[j][t] = text[pos + t];
      ta[j][t] = text[pos + t + 1];
    }
  }
  torch::Tensor x = idx;
  const int U = layout_.numUnits();
  for (int u = 0; u < U; ++u) {
    torch::Tensor buf;
    if (fullReplica()) {
      buf = fullParam_.narrow(0, part_.F[u], part_.P[u]);
    } else {
      startGather(u, Gather::kExact);
      buf = finishGather(u);
    }
    x = unitForward(model_, u, x, unitViews(layout_, u, buf), {},
                    u == U - 1 ? tgt : torch::Tensor(), 1.0);
  }
  double vals[1] = {x.item<double>() / double(K * T)};
  comm_.allReduceDoubles(vals, 1);
  return vals[0];
}

std::string Trainer::sample(int64_t chars, double temperature) {
  torch::Tensor full = fullParameters();
  if (rank_ != 0) return {};
  torch::NoGradGuard noGrad;
  at::Generator gen = at::detail::createCPUGenerator(mixSeed(cfg_.seed, 0x5a3e));
  std::vector<int64_t> tokens = {corpus_.encode('\n')};
  std::string out;
  const int U = layout_.numUnits();
  for (int64_t i = 0; i < chars; ++i) {
    const int64_t n = std::min<int64_t>(int64_t(tokens.size()), model_.context);
    torch::Tensor x = torch::tensor(std::vector<int64_t>(tokens.end() - n, tokens.end()),
                                    torch::kInt64)
                          .unsqueeze(0);
    for (int u = 0; u < U; ++u) {
      x = unitForward(model_, u, x, unitViews(layout_, u, full.narrow(0, part_.F[u], part_.P[u])),
                      {}, {}, 0);
    }
    torch::Tensor probs = torch::softmax(x[0][n - 1] / temperature, 0);
    int64_t next = torch::multinomial(probs, 1, false, gen).item<int64_t>();
    tokens.push_back(next);
    out.push_back(corpus_.decode(next));
  }
  return out;
}

void Trainer::dumpParameters(const std::string& path) {
  torch::Tensor full = fullParameters();
  if (rank_ != 0) return;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    throw std::runtime_error("--dump-params: cannot create " + path + ": " +
                             std::strerror(errno));
  }
  // Format: "CTPD" u32 count; per tensor: u32 name length, name, i64 numel, numel float32.
  auto put = [&](const void* p, size_t n) { out.write(static_cast<const char*>(p), n); };
  put("CTPD", 4);
  uint32_t count = uint32_t(layout_.params.size());
  put(&count, 4);
  for (const ParamSpec& p : layout_.params) {
    uint32_t len = uint32_t(p.name.size());
    put(&len, 4);
    put(p.name.data(), len);
    put(&p.numel, 8);
    put(full.data_ptr<float>() + part_.F[p.unit] + p.offset, 4 * size_t(p.numel));
  }
  out.close();
  if (!out) throw std::runtime_error("--dump-params: write error on " + path);
}

// ---- Checkpoints -----------------------------------------------------------------------------
//
// Whatever the mode, rank r of W saves the logical elements [r*s, (r+1)*s) of every unit (s from
// a W-way partition): parameters (fp32 master weights), then AdamW m, then v. A loader of any
// world size reads the files covering what it needs — here simply all of them, the model being
// small — so a different world size re-partitions. Version 2 adds, after the units, the rank's
// error-feedback residuals (zeropp --error-feedback): they are the rank's own quantization
// errors of its whole outgoing gradient, not a shard of anything, so they are restored only on
// the same world size (and dropped, with a message, on another).

namespace {
constexpr char kCkptMagic[4] = {'C', 'T', 'C', 'K'};
constexpr uint32_t kCkptVersion = 2;

void writeAll(std::ofstream& out, const void* p, size_t n) {
  out.write(static_cast<const char*>(p), std::streamsize(n));
}
}  // namespace

void Trainer::saveCheckpoint(const std::string& dir, int64_t step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw std::runtime_error("rank " + std::to_string(rank_) + ": checkpoint: cannot create " +
                             dir + ": " + ec.message());
  }
  Partition save(layout_, W_, rank_);
  const std::string file = dir + "/rank-" + std::to_string(rank_) + ".bin";
  {
    std::ofstream out(file + ".tmp", std::ios::binary | std::ios::trunc);
    if (!out) {
      throw std::runtime_error("rank " + std::to_string(rank_) + ": checkpoint: cannot create " +
                               file + ".tmp: " + std::strerror(errno));
    }
    writeAll(out, kCkptMagic, 4);
    writeAll(out, &kCkptVersion, 4);
    int32_t hdr[2] = {rank_, W_};
    writeAll(out, hdr, 8);
    writeAll(out, &adamStep_, 8);
    for (int u = 0; u < layout_.numUnits(); ++u) {
      int64_t range[2] = {save.lo(u), save.hi(u)};
      writeAll(out, range, 16);
      const int64_t n = range[1] - range[0];
      if (n <= 0) continue;
      // Where logical element `lo` of unit u lives in this mode's buffers (dp: parts == 1, the
      // shard is the whole unit).
      const int64_t off = part_.parts == 1 ? range[0] : 0;
      writeAll(out, master(u) + off, 4 * size_t(n));
      writeAll(out, stateM(u) + off, 4 * size_t(n));
      writeAll(out, stateV(u) + off, 4 * size_t(n));
    }
    const int32_t residuals = cfg_.errorFeedback ? int32_t(residual_.size()) : 0;
    writeAll(out, &residuals, 4);
    for (int u = 0; u < residuals; ++u) {
      torch::Tensor r = residual_[u].defined() ? residual_[u].to(torch::kFloat32)
                                               : torch::Tensor();
      const int64_t n = r.defined() ? r.numel() : 0;
      writeAll(out, &n, 8);
      if (n > 0) writeAll(out, r.data_ptr<float>(), 4 * size_t(n));
    }
    out.close();
    if (!out) {
      throw std::runtime_error("rank " + std::to_string(rank_) + ": checkpoint: write error on " +
                               file + ".tmp");
    }
  }
  fs::rename(file + ".tmp", file, ec);
  if (ec) {
    throw std::runtime_error("rank " + std::to_string(rank_) + ": rename " + file + ": " +
                             ec.message());
  }
  comm_.barrier();  // every shard is on disk before the manifest says the checkpoint exists
  if (rank_ == 0) {
    nlohmann::json j;
    j["format"] = "chorus-train checkpoint";
    j["version"] = kCkptVersion;
    j["step"] = step;
    j["world_size"] = W_;
    j["mode"] = modeName(cfg_.mode);
    j["seed"] = cfg_.seed;
    j["dtype"] = cfg_.bf16 ? "bf16" : "fp32";
    j["batch"] = cfg_.batch;
    j["corpus_fingerprint"] = corpus_.fingerprint();
    j["model"] = {{"vocab", model_.vocab}, {"layers", model_.layers}, {"width", model_.width},
                  {"heads", model_.heads}, {"context", model_.context}};
    j["unit_elements"] = layout_.unitSize;
    std::vector<std::string> files;
    for (int r = 0; r < W_; ++r) files.push_back("rank-" + std::to_string(r) + ".bin");
    j["files"] = files;
    std::ofstream out(dir + "/manifest.json.tmp", std::ios::trunc);
    out << j.dump(2) << "\n";
    out.close();
    if (!out) {
      throw std::runtime_error("rank 0: checkpoint: write error on " + dir +
                               "/manifest.json.tmp");
    }
    fs::rename(dir + "/manifest.json.tmp", dir + "/manifest.json", ec);
    if (ec) throw std::runtime_error("rank 0: rename manifest in " + dir + ": " + ec.message());
  }
  comm_.barrier();
}

int64_t Trainer::loadCheckpoint(const std::string& dir) {
  const std::string who = "rank " + std::to_string(rank_) + ": --resume " + dir + ": ";
  std::ifstream mf(dir + "/manifest.json");
  if (!mf) throw std::runtime_error(who + "no manifest.json (" + std::strerror(errno) + ")");
  nlohmann::json j;
  try {
    mf >> j;
  } catch (const std::exception& e) {
    throw std::runtime_error(who + "manifest.json: " + e.what());
  }
  auto need = [&](const char* key, int64_t have, int64_t want) {
    if (have != want) {
      throw std::runtime_error(who + "the checkpoint has " + key + " " + std::to_string(have) +
                               ", this run " + key + " " + std::to_string(want));
    }
  };
  const auto& jm = j.at("model");
  need("--layers", jm.at("layers"), model_.layers);
  need("--width", jm.at("width"), model_.width);
  need("--heads", jm.at("heads"), model_.heads);
  need("--context", jm.at("context"), model_.context);
  need("vocabulary size", jm.at("vocab"), model_.vocab);
  if (j.at("corpus_fingerprint").get<uint64_t>() != corpus_.fingerprint()) {
    throw std::runtime_error(who + "the checkpoint was trained on different --data");
  }
  const int oldW = j.at("world_size").get<int>();
  const int64_t step = j.at("step").get<int64_t>();
  if (rank_ == 0 && oldW != W_) {
    std::printf("resume: re-partitioning a checkpoint of world size %d for world size %d\n", oldW,
                W_);
  }
  const std::string oldDtype = j.value("dtype", std::string("fp32"));
  if (rank_ == 0 && oldDtype != (cfg_.bf16 ? "bf16" : "fp32")) {
    std::printf("resume: checkpoint written with --dtype %s, continuing with --dtype %s (the "
                "checkpoint holds fp32 master weights either way)\n",
                oldDtype.c_str(), cfg_.bf16 ? "bf16" : "fp32");
  }
  if (rank_ == 0 && j.at("mode").get<std::string>() != modeName(cfg_.mode)) {
    std::printf("resume: checkpoint written in mode %s, continuing in mode %s\n",
                j.at("mode").get<std::string>().c_str(), modeName(cfg_.mode));
  }
  // Logical p, m, v of every unit, assembled from the old shards.
  const int U = layout_.numUnits();
  std::vector<std::vector<float>> P(U), M(U), V(U);
  for (int u = 0; u < U; ++u) {
    P[u].assign(layout_.unitSize[u], 0.f);
    M[u] = P[u];
    V[u] = P[u];
  }
  int64_t fileStep = -1;
  for (int r = 0; r < oldW; ++r) {
    const std::string file = dir + "/rank-" + std::to_string(r) + ".bin";
    std::ifstream in(file, std::ios::binary);
    if (!in) throw std::runtime_error(who + "cannot open " + file + ": " + std::strerror(errno));
    char magic[4];
    uint32_t version = 0;
    int32_t hdr[2];
    int64_t t = 0;
    in.read(magic, 4);
    in.read(reinterpret_cast<char*>(&version), 4);
    in.read(reinterpret_cast<char*>(hdr), 8);
    in.read(reinterpret_cast<char*>(&t), 8);
    if (!in || std::memcmp(magic, kCkptMagic, 4) != 0 || version < 1 ||
        version > kCkptVersion || hdr[0] != r || hdr[1] != oldW) {
      throw std::runtime_error(who + file + " is not rank " + std::to_string(r) + " of " +
                               std::to_string(oldW) + " of a version 1-" +
                               std::to_string(kCkptVersion) + " checkpoint");
    }
    if (fileStep >= 0 && t != fileStep) throw std::runtime_error(who + file + ": step differs");
    fileStep = t;
    Partition pr(layout_, oldW, r);
    for (int u = 0; u < U; ++u) {
      int64_t range[2];
      in.read(reinterpret_cast<char*>(range), 16);
      if (!in || range[0] != pr.lo(u) || range[1] != pr.hi(u)) {
        throw std::runtime_error(who + file + ": unit " + std::to_string(u) +
                                 " range does not match a " + std::to_string(oldW) +
                                 "-way partition (truncated or different model)");
      }
      const int64_t n = range[1] - range[0];
      if (n <= 0) continue;
      in.read(reinterpret_cast<char*>(P[u].data() + range[0]), 4 * n);
      in.read(reinterpret_cast<char*>(M[u].data() + range[0]), 4 * n);
      in.read(reinterpret_cast<char*>(V[u].data() + range[0]), 4 * n);
      if (!in) throw std::runtime_error(who + file + " is truncated");
    }
    int32_t residuals = 0;
    if (version >= 2) in.read(reinterpret_cast<char*>(&residuals), 4);
    if (residuals > 0 && r == rank_ && oldW == W_ && cfg_.errorFeedback) {
      for (int u = 0; u < residuals && u < U; ++u) {
        int64_t n = 0;
        in.read(reinterpret_cast<char*>(&n), 8);
        if (!in || (n != 0 && n != part_.P[u])) {
          throw std::runtime_error(who + file + ": residual of unit " + std::to_string(u) +
                                   " has the wrong size");
        }
        if (n == 0) continue;
        torch::Tensor t = torch::empty({n}, torch::kFloat32);
        in.read(reinterpret_cast<char*>(t.data_ptr<float>()), 4 * n);
        if (!in) throw std::runtime_error(who + file + " is truncated");
        residual_[u] = t.to(dt_);
      }
    }
    if (r == 0 && rank_ == 0 && cfg_.errorFeedback) {
      if (residuals == 0) {
        std::printf("resume: the checkpoint has no error-feedback residuals; starting from zero\n");
      } else if (oldW != W_) {
        std::printf("resume: error-feedback residuals of world size %d dropped (they are per "
                    "rank); starting from zero\n", oldW);
      }
    }
  }
  // Into this mode's buffers (padding stays zero).
  for (int u = 0; u < U; ++u) {
    setUnit(u, P[u].data());
    for (int64_t j2 = 0; j2 < part_.s[u]; ++j2) {
      const int64_t e = part_.part * part_.s[u] + j2;  // logical element
      const bool in = e < part_.S[u];
      stateM(u)[j2] = in ? M[u][e] : 0.f;
      stateV(u)[j2] = in ? V[u][e] : 0.f;
    }
  }
  adamStep_ = fileStep;
  return step;
}

}  // namespace train
