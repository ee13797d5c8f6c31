#include "model.h"

#include <cmath>
#include <stdexcept>

namespace train {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int64_t ModelLayout::totalParams() const {
  int64_t n = 0;
  for (int64_t s : unitSize) n += s;
  return n;
}

ModelLayout makeLayout(const ModelConfig& cfg) {
  if (cfg.vocab <= 0) throw std::invalid_argument("model: vocabulary is empty");
  if (cfg.layers < 1) throw std::invalid_argument("--layers must be >= 1");
  if (cfg.width < 1 || cfg.heads < 1 || cfg.width % cfg.heads != 0) {
    throw std::invalid_argument("--width (" + std::to_string(cfg.width) +
                                ") must be a positive multiple of --heads (" +
                                std::to_string(cfg.heads) + ")");
  }
  if (cfg.context < 2) throw std::invalid_argument("--context must be >= 2");
  const int64_t d = cfg.width, V = cfg.vocab, T = cfg.context;
  // GPT-2's scaled init of the projections that write into the residual stream.
  const double residStd = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg.layers));
  ModelLayout L;
  int unit = 0;
  int64_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape, ParamSpec::Init init,
                 double stddev = 0.02) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = 1;
    for (int64_t s : p.shape) p.numel *= s;
    p.unit = unit;
    p.offset = offset;
    p.init = init;
    p.stddev = stddev;
    offset += p.numel;
    L.unitParams.back().push_back(static_cast<int>(L.params.size()));
    L.params.push_back(std::move(p));
  };
  auto beginUnit = [&] {
    L.unitParams.emplace_back();
    offset = 0;
  };
  auto endUnit = [&] {
    L.unitSize.push_back(offset);
    ++unit;
  };
  using I = ParamSpec::Init;
  beginUnit();
  add("wte", {V, d}, I::kNormal);
  add("wpe", {T, d}, I::kNormal);
  endUnit();
  for (int64_t l = 0; l < cfg.layers; ++l) {
    const std::string b = "h" + std::to_string(l) + ".";
    beginUnit();
    add(b + "ln1.w", {d}, I::kOne);
    add(b + "ln1.b", {d}, I::kZero);
    add(b + "attn.w", {3 * d, d}, I::kNormal);
    add(b + "proj.w", {d, d}, I::kNormal, residStd);
    add(b + "proj.b", {d}, I::kZero);
    add(b + "ln2.w", {d}, I::kOne);
    add(b + "ln2.b", {d}, I::kZero);
    add(b + "fc.w", {4 * d, d}, I::kNormal);
    add(b + "fc.b", {4 * d}, I::kZero);
    add(b + "fc2.w", {d, 4 * d}, I::kNormal, residStd);
    add(b + "fc2.b", {d}, I::kZero);
    endUnit();
  }
  beginUnit();
  add("lnf.w", {d}, I::kOne);
  add("lnf.b", {d}, I::kZero);
  add("head.w", {V, d}, I::kNormal);
  endUnit();
  return L;
}

std::vector<float> initUnit(const ModelLayout& layout, int u, uint64_t seed) {
  std::vector<float> out(static_cast<size_t>(layout.unitSize[u]));
  for (int i : layout.unitParams[u]) {
    const ParamSpec& p = layout.params[i];
    float* dst = out.data() + p.offset;
    if (p.init == ParamSpec::Init::kZero) {
      std::fill(dst, dst + p.numel, 0.0f);
    } else if (p.init == ParamSpec::Init::kOne) {
      std::fill(dst, dst + p.numel, 1.0f);
    } else {
      at::Generator gen = at::detail::createCPUGenerator(mixSeed(seed, 0x1417, i));
      torch::Tensor t = torch::randn({p.numel}, gen, torch::kFloat32) * p.stddev;
      std::memcpy(dst, t.data_ptr<float>(), sizeof(float) * p.numel);
    }
  }
  return out;
}

std::vector<torch::Tensor> unitViews(const ModelLayout& layout, int u,
                                     const torch::Tensor& unitBuffer) {
  std::vector<torch::Tensor> v;
  for (int i : layout.unitParams[u]) {
    const ParamSpec& p = layout.params[i];
    v.push_back(unitBuffer.narrow(0, p.offset, p.numel).view(p.shape));
  }
  return v;
}

namespace {

torch::Tensor dropout(const torch::Tensor& x, const torch::Tensor& masks, int64_t site) {
  if (!masks.defined()) return x;
  return x * masks.select(1, site);
}

}  // namespace

torch::Tensor unitForward(const ModelConfig& cfg, int u, const torch::Tensor& x,
                          const std::vector<torch::Tensor>& p, const torch::Tensor& masks,
                          const torch::Tensor& targets, double lossScale) {
  const int64_t d = cfg.width;
  const int last = static_cast<int>(cfg.layers) + 1;
  if (u == 0) {
    const int64_t T = x.size(1);
    torch::Tensor h = torch::embedding(p[0], x) + p[1].narrow(0, 0, T).unsqueeze(0);
    return dropout(h, masks, 0);
  }
  if (u == last) {
    torch::Tensor h = torch::layer_norm(x, {d}, p[0], p[1]);
    torch::Tensor logits = torch::matmul(h, p[2].t());
    if (!targets.defined()) return logits;
    // The loss in fp32 whatever the compute dtype (a no-op with fp32).
    logits = logits.to(torch::kFloat32);
    torch::Tensor ce = torch::nll_loss(torch::log_softmax(logits.reshape({-1, cfg.vocab}), 1),
                                       targets.reshape({-1}), {}, at::Reduction::Sum);
    return ce * lossScale;
  }
  // A pre-norm transformer block: causal multi-head self-attention, then a GELU MLP.
  const int64_t l = u - 1;
  const int64_t n = x.size(0), T = x.size(1), H = cfg.heads, dh = d / H;
  torch::Tensor h = torch::layer_norm(x, {d}, p[0], p[1]);
  // No bias on q, k, v: a key bias has an exactly zero gradient (softmax ignores a shift that is
  // the same for every key), and AdamW would turn its rounding noise into full-size updates.
  torch::Tensor qkv = torch::linear(h, p[2]);  // [n, T, 3d]
  auto parts = qkv.split(d, 2);
  auto heads = [&](const torch::Tensor& t) { return t.reshape({n, T, H, dh}).transpose(1, 2); };
  torch::Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(dh)));
  torch::Tensor causal = torch::ones({T, T}, torch::kBool).triu(1);
  att = torch::softmax(att.masked_fill(causal, -std::numeric_limits<float>::infinity()), -1);
  torch::Tensor y = torch::matmul(att, v).transpose(1, 2).reshape({n, T, d});
  y = torch::linear(y, p[3], p[4]);
  torch::Tensor r = x + dropout(y, masks, 1 + 2 * l);
  torch::Tensor m = torch::gelu(torch::linear(torch::layer_norm(r, {d}, p[5], p[6]), p[7], p[8]));
  m = torch::linear(m, p[9], p[10]);
  return r + dropout(m, masks, 2 + 2 * l);
}

torch::Tensor sampleMasks(const ModelConfig& cfg, uint64_t seed, int64_t step, int64_t sample) {
  at::Generator gen = at::detail::createCPUGenerator(
      mixSeed(seed, 0xd20f, static_cast<uint64_t>(step), static_cast<uint64_t>(sample)));
  const float keep = static_cast<float>(1.0 - cfg.dropout);
  torch::Tensor r = torch::rand({dropoutSites(cfg), cfg.context, cfg.width}, gen, torch::kFloat32);
  return (r < keep).to(torch::kFloat32) * (1.0f / keep);
}

}  // namespace train
