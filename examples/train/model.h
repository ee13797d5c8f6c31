// The model of chorus-train: a GPT-style character-level language model written as a list of
// *units* (the embedding, each transformer block, the final norm + output head). A unit is the
// granularity of everything distributed in this program: a gradient bucket, a ZeRO-3 gather, a
// slice of a checkpoint. Parameters are not owned here: every forward function takes the unit's
// parameter tensors, so the trainer decides where they live (views of one flat buffer, or a
// gathered ZeRO-3 buffer that is freed after use).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace train {

struct ModelConfig {
  int64_t vocab = 0;
  int64_t layers = 3;
  int64_t width = 96;
  int64_t heads = 4;
  int64_t context = 64;
  double dropout = 0.1;
};

/// One parameter tensor: where it sits in its unit's logical (unpadded) flat range.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int unit = 0;
  int64_t offset = 0;  // elements from the start of the unit
  enum class Init { kNormal, kZero, kOne } init = Init::kNormal;
  double stddev = 0.02;
};

/// Every parameter of the model in a fixed order, grouped into units.
struct ModelLayout {
  std::vector<ParamSpec> params;
  std::vector<int64_t> unitSize;             // logical elements per unit
  std::vector<std::vector<int>> unitParams;  // indices into params, per unit
  int numUnits() const { return static_cast<int>(unitSize.size()); }
  int64_t totalParams() const;
};

ModelLayout makeLayout(const ModelConfig& cfg);

/// The initial values of unit `u` (logical layout), a function of the seed only: every rank of
/// every world size computes the same numbers.
std::vector<float> initUnit(const ModelLayout& layout, int u, uint64_t seed);

/// Views of the unit's parameters inside `unitBuffer`, which holds the unit's logical range
/// (and maybe padding after it).
std::vector<torch::Tensor> unitViews(const ModelLayout& layout, int u,
                                     const torch::Tensor& unitBuffer);

/// Dropout sites: after the embedding, after attention and after the MLP of every block.
inline int64_t dropoutSites(const ModelConfig& cfg) { return 1 + 2 * cfg.layers; }

/// Runs unit `u`. Unit 0 takes token ids [n, T] (int64); blocks take and return activations
/// [n, T, width]; the last unit returns sum(cross-entropy over targets) * lossScale when
/// `targets` is defined, else the logits [n, T, vocab]. `masks` is [n, sites, T, width]
/// (already scaled by 1/(1-p)) or undefined for no dropout.
torch::Tensor unitForward(const ModelConfig& cfg, int u, const torch::Tensor& x,
                          const std::vector<torch::Tensor>& params, const torch::Tensor& masks,
                          const torch::Tensor& targets, double lossScale);

/// The dropout masks of one sample, a function of (seed, step, global sample index) only, so a
/// sample sees the same randomness whichever rank holds it and whatever the world size.
torch::Tensor sampleMasks(const ModelConfig& cfg, uint64_t seed, int64_t step, int64_t sample);

/// splitmix64 finalizer; the program's one source of derived seeds.
uint64_t mix64(uint64_t x);
inline uint64_t mixSeed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  return mix64(mix64(mix64(seed ^ 0x5851f42d4c957f2dULL) ^ a) ^ b) ^ mix64(c + 0x1234567ULL);
}

}  // namespace train
