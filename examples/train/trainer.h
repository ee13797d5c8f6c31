// The distributed training step of chorus-train, one class for every mode, over flat buffers:
//
//   unit u (embedding, block l, head) has S[u] logical elements, padded to P[u] = parts * s[u];
//   rank r owns elements [r*s[u], (r+1)*s[u]) of every unit (its *shard*).
//
//   buffer           dp            zero1               zero2               zero3
//   params           full          full                full                shard (gathered per
//                                                                           unit, then freed)
//   gradients        full          full (reduce-       shard (+ one unit    shard (+ one unit
//                                  scattered in place) in flight)           in flight)
//   fp32 master      full          shard               shard               shard
//   AdamW m, v       full          shard               shard               shard
//
// Parameters and gradients are in the compute dtype (--dtype fp32 or bf16), which is also what
// goes over the wire. With bf16 the update runs on fp32 master weights of the shard, rounded
// back into the bf16 parameters after each step (the ZeRO paper's 2 + 2 + 12 bytes per
// parameter); with fp32 the parameters are their own master weights.
//
// dp is the same code with parts = 1 (the "shard" is everything). Every mode then runs the same
// AdamW over its shard, with the same global-norm clipping.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm.h"
#include "corpus.h"
#include "model.h"

namespace torch::autograd {
struct Node;
}

namespace train {

enum class Mode { kDp, kZero1, kZero2, kZero3, kZeroPP };
const char* modeName(Mode m);

struct TrainConfig {
  Mode mode = Mode::kDp;
  int64_t batch = 24;  // global sequences per step (divisible by 1, 2, 3, 4)
  int64_t accum = 1;   // micro-batches per rank per step
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-6, weightDecay = 0.01;
  double clip = 1.0;  // global gradient norm; <= 0: off
  uint64_t seed = 1234;
  int64_t evalSamples = 64;
  bool errorFeedback = false;  // zeropp: keep each rank's gradient quantization residual
  bool bf16 = false;           // bf16 parameters and gradients, fp32 master weights
};

/// Unit u's padded partition over `parts` ranks, as seen by rank `part`.
struct Partition {
  Partition(const ModelLayout& layout, int parts, int part);
  int parts, part;
  std::vector<int64_t> S, P, s;  // logical, padded, shard elements per unit
  std::vector<int64_t> F, H;     // unit offsets in the full and in the shard buffer
  int64_t fullSize = 0, shardSize = 0;
  /// The logical elements of unit u this rank owns: [lo, hi), possibly empty.
  int64_t lo(int u) const { return std::min<int64_t>(S[u], part * s[u]); }
  int64_t hi(int u) const { return std::min<int64_t>(S[u], (part + 1) * s[u]); }
};

struct StepResult {
  double loss = 0;       // global mean loss of the step (before the update)
  double gradNorm = 0;   // global gradient norm (before clipping)
};

class Trainer {
 public:
  Trainer(const ModelConfig& model, const TrainConfig& cfg, const Corpus& corpus, Comm& comm);
  ~Trainer();

  /// Parameters from the seed; optimizer states zero.
  void initFromSeed();
  /// Runs step `step` (1-based): forward/backward over the micro-batches, communication,
  /// clipping, AdamW.
  StepResult step(int64_t step);
  /// Mean loss over held-out windows (no dropout); collective.
  double heldOutLoss();
  /// The whole model in the full layout (F offsets); collective (ZeRO-3 gathers).
  torch::Tensor fullParameters();
  /// Generates text on rank 0 (collective because of fullParameters()).
  std::string sample(int64_t chars, double temperature);
  /// Writes the parameters (logical, per tensor) to `path` on rank 0; collective.
  void dumpParameters(const std::string& path);

  /// Sharded checkpoint: dir/rank-<r>.bin per rank, dir/manifest.json by rank 0; collective.
  void saveCheckpoint(const std::string& dir, int64_t step);
  /// Loads a checkpoint of any world size (re-partitioning); returns its step.
  int64_t loadCheckpoint(const std::string& dir);

  const ModelLayout& layout() const { return layout_; }
  const Partition& partition() const { return part_; }
  /// Bytes of this rank's flat buffers: parameters, gradients, optimizer states.
  struct Footprint {
    int64_t params = 0, grads = 0, optimizer = 0;
  };
  Footprint footprint() const;
  /// Bytes sent so far by this rank (world and host communicators), within / across hosts.
  void bytesSent(uint64_t& intraHost, uint64_t& interHost) const {
    comm_.bytesSent(intraHost, interHost);
    host_.bytesSent(intraHost, interHost);
  }
  std::string hostAlgorithms() const { return host_.get() ? host_.algorithms() : ""; }

 private:
  bool sharded() const { return cfg_.mode == Mode::kZero3 || cfg_.mode == Mode::kZeroPP; }
  bool fullReplica() const { return !sharded(); }
  bool shardedGrads() const { return cfg_.mode == Mode::kZero2 || sharded(); }
  // This rank's shard of unit u (s[u] elements) in each buffer, as tensor views.
  torch::Tensor paramShard(int u) const;   // compute dtype
  torch::Tensor gradShard(int u) const;    // compute dtype
  torch::Tensor masterShard(int u) const;  // fp32: master_ (bf16) or paramShard (fp32)
  float* master(int u) const { return masterShard(u).data_ptr<float>(); }
  float* stateM(int u) { return m_.data_ptr<float>() + part_.H[u]; }
  float* stateV(int u) { return v_.data_ptr<float>() + part_.H[u]; }
  /// Sets unit u from its logical fp32 values: the full parameters of a replicated mode, the
  /// master shard and the compute shard.
  void setUnit(int u, const float* logical);

  struct Batch {
    torch::Tensor idx, targets, masks;
    double lossScale = 0;
  };
  Batch makeBatch(int64_t step, int64_t micro);

  void installHooks();
  void onParamGradReady(int param);
  void launchReadyUnits();
  void launchUnit(int u);

  double microStepReplicated(const Batch& b);  // dp, zero1, zero2
  double microStepZero3(const Batch& b);
  // zero3 gathers every time at full precision from the W-way shards; zeropp's forward gather
  // is int8 (qwZ) and keeps a host-local secondary shard from which backward gathers inside
  // the host (hpZ).
  enum class Gather { kExact, kForward, kBackward };
  void startGather(int u, Gather kind);
  torch::Tensor finishGather(int u);
  void reduceScatterUnit(int u, const std::vector<torch::Tensor>& grads);
  void addErrorFeedback(int u, torch::Tensor& send);
  void adamw(int64_t t, double gradScale);

  ModelConfig model_;
  TrainConfig cfg_;
  const Corpus& corpus_;
  Comm& comm_;
  ModelLayout layout_;
  Partition part_;
  int W_, rank_;
  int64_t localBatch_, microBatch_;
  int64_t adamStep_ = 0;

  torch::ScalarType dt_;                      // compute dtype: kFloat32 or kBFloat16
  chorusDataType_t cdt_;                      // the same, for chorus
  torch::Tensor fullParam_, fullGrad_;        // dp, zero1, zero2 (fullGrad_: dp, zero1)
  torch::Tensor shardParam_, shardGrad_;      // zero3 params; zero2/zero3 gradients
  torch::Tensor master_;                      // bf16 only: fp32 master weights of the shard
  torch::Tensor m_, v_;                       // AdamW states of the shard
  std::vector<torch::Tensor> leaves_;         // per parameter, views of fullParam_
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;

  // Backward bookkeeping of the replicated modes.
  std::vector<int> readyParams_;  // per unit, parameters whose gradient has arrived
  std::vector<bool> unitReady_;
  int nextLaunch_ = 0;            // units launch in descending order, the same on every rank
  bool lastMicro_ = false;

  std::unique_ptr<InFlight> inflight_;
  std::vector<chorusRequest_t> gatherReq_;  // zero3: per unit
  std::vector<torch::Tensor> gatherBuf_;

  // zeropp
  Comm host_;                                  // the ranks of this host
  std::vector<int64_t> s2_;                    // secondary (host-local) shard elements per unit
  std::vector<torch::Tensor> secondary_;       // per unit, from forward until its backward
  std::vector<chorusQuantConfig_t> qw_, qg_;   // per unit: int8 weights, int4 gradients
  std::vector<torch::Tensor> residual_;        // per unit, error feedback (padded full size)
};

}  // namespace train
