// Memory of chorus-train measured where it is held, not computed from the flat buffers: a
// counting wrapper installed as libtorch's CPU allocator sees every tensor the process allocates
// (the flat buffers, autograd's .grad tensors and activations, gathered units, send and receive
// buffers), and the kernel's peak resident set (VmHWM, reset per phase through
// /proc/self/clear_refs) sees everything else too (libtorch itself, chorus's staging buffers).
//
// Each allocation carries a tag — parameters, gradients, optimizer states (fp32 master weights,
// AdamW m and v), or other (activations and temporaries) — from the code that made it: a TagGuard
// in scope, or retag() for tensors autograd allocated (a parameter's gradient is made by autograd
// as "other" and becomes "gradients" when the trainer takes it). The bytes per tag and in total
// are tracked live, and their maxima kept per phase of the step.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <string>

namespace train::memory {

enum class Tag { kParams, kGrads, kOptimizer, kOther };
constexpr int kTags = 4;
enum class Phase { kSetup, kForward, kBackward, kOptimizer, kEval };
constexpr int kPhases = 5;
const char* phaseName(Phase p);

/// Makes the counting allocator libtorch's CPU allocator; tensors allocated before are not seen.
void install();
bool installed();

/// Allocations made by this thread while the guard lives carry `tag`.
class TagGuard {
 public:
  explicit TagGuard(Tag tag);
  ~TagGuard();
  TagGuard(const TagGuard&) = delete;
  TagGuard& operator=(const TagGuard&) = delete;

 private:
  Tag saved_;
};

/// Counts the storage of `t` (if the counting allocator made it) under `tag` from now on.
void retag(const torch::Tensor& t, Tag tag);

/// Enters phase `p`: the peaks of `p` start from the bytes held now; the peak resident set of
/// the phase being left is recorded and the kernel's counter reset.
void setPhase(Phase p);

struct Peaks {
  std::array<std::array<int64_t, kTags + 1>, kPhases> bytes{};  // [phase][tag, total]
  std::array<int64_t, kPhases> rss{};                           // VmHWM per phase, bytes
};
/// The maxima so far (closes the current phase's resident-set measurement first).
Peaks peaks();

}  // namespace train::memory
