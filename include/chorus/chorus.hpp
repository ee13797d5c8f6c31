/// chorus C++ API: RAII communicators, typed std::span overloads, chorus::Error exceptions.
///
/// A thin header-only layer over chorus.h: every call maps to one C call, failures throw
/// chorus::Error carrying the result code and the communicator's last error message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "chorus/chorus.h"

namespace chorus {

/// Thrown by every failing call; code() is the C result.
class Error : public std::runtime_error {
 public:
  Error(chorusResult_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  chorusResult_t code() const noexcept { return code_; }

 private:
  chorusResult_t code_;
};

namespace detail {
inline void check(chorusResult_t r, chorusComm_t comm = nullptr) {
  if (r != chorusSuccess && r != chorusInProgress)
    throw Error(r, std::string(chorusGetErrorString(r)) + ": " + chorusGetLastError(comm));
}
}  // namespace detail

/// The chorusDataType_t of a C++ element type.
template <typename T>
constexpr chorusDataType_t dataTypeOf() {
  if constexpr (std::is_same_v<T, int8_t>) return chorusInt8;
  else if constexpr (std::is_same_v<T, uint8_t>) return chorusUint8;
  else if constexpr (std::is_same_v<T, int32_t>) return chorusInt32;
  else if constexpr (std::is_same_v<T, uint32_t>) return chorusUint32;
  else if constexpr (std::is_same_v<T, int64_t>) return chorusInt64;
  else if constexpr (std::is_same_v<T, uint64_t>) return chorusUint64;
  else if constexpr (std::is_same_v<T, float>) return chorusFloat32;
  else if constexpr (std::is_same_v<T, double>) return chorusFloat64;
  else static_assert(sizeof(T) == 0, "no chorus data type for this C++ type; use the void* API");
}

/// chorusMemAlloc: `bytes` in a segment the host's ranks can map (zero-copy over shared memory).
inline void* memAlloc(size_t bytes) {
  void* p = nullptr;
  detail::check(chorusMemAlloc(&p, bytes));
  return p;
}
/// chorusMemFree.
inline void memFree(void* p) { detail::check(chorusMemFree(p)); }

/// Reduction operators.
enum class Op : int { kSum = chorusSum, kProd = chorusProd, kMax = chorusMax, kMin = chorusMin,
                      kAvg = chorusAvg };

/// A pending nonblocking operation. wait() is called by the destructor if needed.
class Request {
 public:
  Request() = default;
  explicit Request(chorusRequest_t r) : r_(r) {}
  Request(Request&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
  Request& operator=(Request&& o) noexcept {
    if (this != &o) {
      finish();
      r_ = std::exchange(o.r_, nullptr);
    }
    return *this;
  }
  ~Request() { finish(); }
  /// Blocks until complete; throws on failure.
  void wait() {
    if (r_) detail::check(chorusWait(&r_));
  }
  /// True when complete (throws if it failed).
  bool test() {
    if (!r_) return true;
    int done = 0;
    detail::check(chorusTest(&r_, &done));
    return done != 0;
  }

 private:
  void finish() noexcept {
    if (r_) chorusWait(&r_);
  }
  chorusRequest_t r_ = nullptr;
};

/// A communicator, destroyed with its owner.
class Comm {
 public:
  /// Joins the job described by the environment (chorus-run, torchrun, mpirun, srun).
  static Comm fromEnv() {
    chorusComm_t c = nullptr;
    detail::check(chorusCommInitFromEnv(&c));
    return Comm(c);
  }
  /// Creates the job's id (and its rendezvous store) in this process.
  static chorusUniqueId uniqueId() {
    chorusUniqueId id;
    detail::check(chorusGetUniqueId(&id));
    return id;
  }
  static Comm initRank(int nranks, const chorusUniqueId& id, int rank) {
    chorusComm_t c = nullptr;
    detail::check(chorusCommInitRank(&c, nranks, id, rank));
    return Comm(c);
  }

  Comm() = default;
  explicit Comm(chorusComm_t c) : c_(c) {}
  Comm(Comm&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
  Comm& operator=(Comm&& o) noexcept {
    if (this != &o) {
      reset();
      c_ = std::exchange(o.c_, nullptr);
    }
    return *this;
  }
  ~Comm() { reset(); }

  chorusComm_t get() const { return c_; }
  /// Gives up ownership without destroying the communicator.
  chorusComm_t release() noexcept { return std::exchange(c_, nullptr); }
  explicit operator bool() const { return c_ != nullptr; }
  int rank() const {
    int r = 0;
    detail::check(chorusCommUserRank(c_, &r), c_);
    return r;
  }
  int size() const {
    int n = 0;
    detail::check(chorusCommCount(c_, &n), c_);
    return n;
  }
  /// Ranks with equal color form a new communicator; an empty Comm for CHORUS_SPLIT_NOCOLOR.
  Comm split(int color, int key) {
    chorusComm_t n = nullptr;
    detail::check(chorusCommSplit(c_, color, key, &n), c_);
    return Comm(n);
  }
  /// The ranks on this host (CHORUS_SPLIT_HOST) or host and NUMA node (CHORUS_SPLIT_NUMA).
  Comm splitType(int type, int key) {
    chorusComm_t n = nullptr;
    detail::check(chorusCommSplitType(c_, type, key, &n), c_);
    return Comm(n);
  }
  /// The ranks not in `exclude` (the same list on each of them), even after this one failed.
  Comm shrink(const std::vector<int>& exclude) {
    chorusComm_t n = nullptr;
    detail::check(chorusCommShrink(c_, exclude.data(), static_cast<int>(exclude.size()), &n), c_);
    return Comm(n);
  }
  void abort() {
    if (c_) chorusCommAbort(std::exchange(c_, nullptr));
  }

  template <typename T>
  void allReduce(std::span<const T> in, std::span<T> out, Op op = Op::kSum) {
    requireSize(out.size() == in.size(), "allReduce: out.size() != in.size()");
    detail::check(chorusAllReduce(in.data(), out.data(), in.size(), dataTypeOf<T>(),
                                  static_cast<chorusRedOp_t>(op), c_, nullptr), c_);
  }
  template <typename T>
  void allReduce(std::span<T> inout, Op op = Op::kSum) {
    detail::check(chorusAllReduce(inout.data(), inout.data(), inout.size(), dataTypeOf<T>(),
                                  static_cast<chorusRedOp_t>(op), c_, nullptr), c_);
  }
  template <typename T>
  Request iAllReduce(std::span<const T> in, std::span<T> out, Op op = Op::kSum) {
    requireSize(out.size() == in.size(), "iAllReduce: out.size() != in.size()");
    chorusRequest_t r = nullptr;
    detail::check(chorusIAllReduce(in.data(), out.data(), in.size(), dataTypeOf<T>(),
                                   static_cast<chorusRedOp_t>(op), c_, nullptr, &r), c_);
    return Request(r);
  }
  template <typename T>
  void broadcast(std::span<T> buf, int root) {
    detail::check(chorusBroadcast(buf.data(), buf.data(), buf.size(), dataTypeOf<T>(), root, c_,
                                  nullptr), c_);
  }
  template <typename T>
  void reduce(std::span<const T> in, std::span<T> out, int root, Op op = Op::kSum) {
    detail::check(chorusReduce(in.data(), out.data(), in.size(), dataTypeOf<T>(),
                               static_cast<chorusRedOp_t>(op), root, c_, nullptr), c_);
  }
  /// out holds size() * in.size() elements.
  template <typename T>
  void allGather(std::span<const T> in, std::span<T> out) {
    requireSize(out.size() == in.size() * static_cast<size_t>(size()),
                "allGather: out.size() != size() * in.size()");
    detail::check(chorusAllGather(in.data(), out.data(), in.size(), dataTypeOf<T>(), c_, nullptr),
                  c_);
  }
  /// in holds size() * out.size() elements.
  template <typename T>
  void reduceScatter(std::span<const T> in, std::span<T> out, Op op = Op::kSum) {
    requireSize(in.size() == out.size() * static_cast<size_t>(size()),
                "reduceScatter: in.size() != size() * out.size()");
    detail::check(chorusReduceScatter(in.data(), out.data(), out.size(), dataTypeOf<T>(),
                                      static_cast<chorusRedOp_t>(op), c_, nullptr), c_);
  }
  /// Quantized collectives (chorus.h: chorusReduceScatterQuantized and the others); `config`
  /// is usually a chorus::QuantConfig. in holds size() * out.size() elements.
  template <typename T>
  void reduceScatterQuantized(std::span<const T> in, std::span<T> out,
                              const chorusQuantConfig_t& config, Op op = Op::kSum) {
    requireSize(in.size() == out.size() * static_cast<size_t>(size()),
                "reduceScatterQuantized: in.size() != size() * out.size()");
    detail::check(chorusReduceScatterQuantized(in.data(), out.data(), out.size(), dataTypeOf<T>(),
                                               static_cast<chorusRedOp_t>(op), &config, c_,
                                               nullptr), c_);
  }
  template <typename T>
  Request iReduceScatterQuantized(std::span<const T> in, std::span<T> out,
                                  const chorusQuantConfig_t& config, Op op = Op::kSum) {
    requireSize(in.size() == out.size() * static_cast<size_t>(size()),
                "iReduceScatterQuantized: in.size() != size() * out.size()");
    chorusRequest_t r = nullptr;
    detail::check(chorusIReduceScatterQuantized(in.data(), out.data(), out.size(),
                                                dataTypeOf<T>(), static_cast<chorusRedOp_t>(op),
                                                &config, c_, nullptr, &r), c_);
    return Request(r);
  }
  /// out holds size() * in.size() elements.
  template <typename T>
  void allGatherQuantized(std::span<const T> in, std::span<T> out,
                          const chorusQuantConfig_t& config) {
    requireSize(out.size() == in.size() * static_cast<size_t>(size()),
                "allGatherQuantized: out.size() != size() * in.size()");
    detail::check(chorusAllGatherQuantized(in.data(), out.data(), in.size(), dataTypeOf<T>(),
                                           &config, c_, nullptr), c_);
  }
  template <typename T>
  Request iAllGatherQuantized(std::span<const T> in, std::span<T> out,
                              const chorusQuantConfig_t& config) {
    requireSize(out.size() == in.size() * static_cast<size_t>(size()),
                "iAllGatherQuantized: out.size() != size() * in.size()");
    chorusRequest_t r = nullptr;
    detail::check(chorusIAllGatherQuantized(in.data(), out.data(), in.size(), dataTypeOf<T>(),
                                            &config, c_, nullptr, &r), c_);
    return Request(r);
  }
  template <typename T>
  void allReduceQuantized(std::span<const T> in, std::span<T> out,
                          const chorusQuantConfig_t& config, Op op = Op::kSum) {
    requireSize(out.size() == in.size(), "allReduceQuantized: out.size() != in.size()");
    detail::check(chorusAllReduceQuantized(in.data(), out.data(), in.size(), dataTypeOf<T>(),
                                           static_cast<chorusRedOp_t>(op), &config, c_, nullptr),
                  c_);
  }
  template <typename T>
  Request iAllReduceQuantized(std::span<const T> in, std::span<T> out,
                              const chorusQuantConfig_t& config, Op op = Op::kSum) {
    requireSize(out.size() == in.size(), "iAllReduceQuantized: out.size() != in.size()");
    chorusRequest_t r = nullptr;
    detail::check(chorusIAllReduceQuantized(in.data(), out.data(), in.size(), dataTypeOf<T>(),
                                            static_cast<chorusRedOp_t>(op), &config, c_, nullptr,
                                            &r), c_);
    return Request(r);
  }
  /// in and out hold size() blocks of equal length.
  template <typename T>
  void allToAll(std::span<const T> in, std::span<T> out) {
    size_t n = static_cast<size_t>(size());
    requireSize(in.size() == out.size() && in.size() % n == 0,
                "allToAll: in and out must hold size() equal blocks");
    detail::check(chorusAllToAll(in.data(), out.data(), in.size() / n, dataTypeOf<T>(), c_,
                                 nullptr), c_);
  }
  template <typename T>
  void send(std::span<const T> buf, int peer) {
    detail::check(chorusSend(buf.data(), buf.size(), dataTypeOf<T>(), peer, c_, nullptr), c_);
  }
  template <typename T>
  void recv(std::span<T> buf, int peer) {
    detail::check(chorusRecv(buf.data(), buf.size(), dataTypeOf<T>(), peer, c_, nullptr), c_);
  }
  void barrier() { detail::check(chorusBarrier(c_, nullptr), c_); }

  /// chorusCommRegister: returns the handle for deregisterMemory().
  void* registerMemory(void* buff, size_t bytes) {
    void* h = nullptr;
    detail::check(chorusCommRegister(c_, buff, bytes, &h), c_);
    return h;
  }
  /// chorusCommDeregister.
  void deregisterMemory(void* handle) { detail::check(chorusCommDeregister(c_, handle), c_); }

 private:
  static void requireSize(bool ok, const char* what) {
    if (!ok) throw Error(chorusInvalidArgument, what);
  }
  void reset() noexcept {
    if (c_) chorusCommDestroy(std::exchange(c_, nullptr));
  }
  chorusComm_t c_ = nullptr;
};

/// A chorusQuantConfig_t holding CHORUS_QUANT_CONFIG_INIT's defaults, with chainable setters:
/// `chorus::QuantConfig().withBits(4).withGroupSize(128).stochastic(seed)`.
struct QuantConfig : chorusQuantConfig_t {
  QuantConfig() : chorusQuantConfig_t CHORUS_QUANT_CONFIG_INIT {}
  QuantConfig& withBits(int b) {
    bits = b;
    return *this;
  }
  QuantConfig& withGroupSize(size_t elements) {
    groupSize = elements;
    return *this;
  }
  /// Scale and offset per group instead of a scale only.
  QuantConfig& asymmetric(bool on = true) {
    mode = on ? chorusQuantAsymmetric : chorusQuantSymmetric;
    return *this;
  }
  /// Stochastic rounding with this seed.
  QuantConfig& stochastic(uint64_t withSeed) {
    rounding = chorusRoundStochastic;
    seed = withSeed;
    return *this;
  }
};

/// Bytes of `count` elements quantized with `config`.
inline size_t quantizedSize(size_t count, const chorusQuantConfig_t& config) {
  size_t bytes = 0;
  detail::check(chorusQuantizedSize(count, &config, &bytes));
  return bytes;
}

/// Quantizes `count` elements of `datatype` (float32, bfloat16, float16) from `input` into
/// `quantized` (quantizedSize(count, config) bytes). Local; host buffers.
inline void quantize(const void* input, void* quantized, size_t count, chorusDataType_t datatype,
                     const chorusQuantConfig_t& config) {
  detail::check(chorusQuantize(input, quantized, count, datatype, &config, nullptr));
}

/// Decodes `count` elements quantized with `config` into `output`, as `datatype`.
inline void dequantize(const void* quantized, void* output, size_t count,
                       chorusDataType_t datatype, const chorusQuantConfig_t& config) {
  detail::check(chorusDequantize(quantized, output, count, datatype, &config, nullptr));
}

/// float data quantized into a new buffer.
inline std::vector<std::byte> quantize(std::span<const float> input,
                                       const chorusQuantConfig_t& config) {
  std::vector<std::byte> out(quantizedSize(input.size(), config));
  quantize(input.data(), out.data(), input.size(), chorusFloat32, config);
  return out;
}

/// Decodes into `output`, whose size is the element count; `quantized` must hold exactly
/// quantizedSize(output.size(), config) bytes.
inline void dequantize(std::span<const std::byte> quantized, std::span<float> output,
                       const chorusQuantConfig_t& config) {
  if (quantized.size() != quantizedSize(output.size(), config)) {
    throw Error(chorusInvalidArgument,
                "dequantize: quantized.size() is not quantizedSize(output.size(), config)");
  }
  dequantize(quantized.data(), output.data(), output.size(), chorusFloat32, config);
}

/// RAII group: sends and receives issued while it lives are posted together.
class Group {
 public:
  Group() { detail::check(chorusGroupStart()); }
  ~Group() noexcept(false) {
    if (std::uncaught_exceptions() == 0) detail::check(chorusGroupEnd());
    else chorusGroupEnd();
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
};

}  // namespace chorus
