// Status and StatusOr: how every layer below the public API reports failure.
//
// No exceptions below the C++ API. A Status carries a code (mirroring chorusResult_t), a message
// written for the user (it names the argument, rank, peer, file or system call involved) and the
// source location that created it, so a log line says where an error was born, not only where it
// surfaced.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace chorus {

// Where a Status was created. __builtin_FILE/__builtin_LINE as default arguments give the
// caller's location with g++ and clang alike (clang 14 cannot use std::source_location).
struct SourceLoc {
  const char* file;
  int line;
  static constexpr SourceLoc current(const char* file = __builtin_FILE(),
                                     int line = __builtin_LINE()) {
    return {file, line};
  }
};

enum class Code : int {
  kOk = 0,
  kInvalidArgument,
  kInvalidUsage,
  kSystemError,
  kRemoteError,
  kTimeout,
  kInternal,
  kInProgress,
};

const char* codeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message,
         SourceLoc where = SourceLoc::current());
  Status(const Status& o) : rep_(o.rep_ ? std::make_unique<Rep>(*o.rep_) : nullptr) {}
  Status& operator=(const Status& o) {
    if (this != &o) rep_ = o.rep_ ? std::make_unique<Rep>(*o.rep_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status okStatus() { return Status(); }

  // An ok Status is one null pointer: returning and testing one costs next to nothing on the
  // per-call path.
  bool ok() const { return rep_ == nullptr; }
  Code code() const { return rep_ ? rep_->code : Code::kOk; }
  const std::string& message() const;
  const char* file() const { return rep_ ? rep_->file : ""; }
  int line() const { return rep_ ? rep_->line : 0; }

  // "InvalidUsage: <message> [file.cc:123]"
  std::string toString() const;

  // Prefixes context to the message, keeping code and origin: "allreduce: <message>".
  Status withContext(std::string_view context) const;

  // Explicitly drop a status whose failure does not matter (best-effort clean-up paths).
  void ignore() const {}

 private:
  struct Rep {
    Code code;
    std::string message;
    const char* file;
    int line;
  };
  std::unique_ptr<Rep> rep_;
};

inline Status invalidArgument(std::string msg,
                              SourceLoc w = SourceLoc::current()) {
  return Status(Code::kInvalidArgument, std::move(msg), w);
}
inline Status invalidUsage(std::string msg,
                           SourceLoc w = SourceLoc::current()) {
  return Status(Code::kInvalidUsage, std::move(msg), w);
}
inline Status systemError(std::string msg,
                          SourceLoc w = SourceLoc::current()) {
  return Status(Code::kSystemError, std::move(msg), w);
}
inline Status remoteError(std::string msg,
                          SourceLoc w = SourceLoc::current()) {
  return Status(Code::kRemoteError, std::move(msg), w);
}
inline Status timeoutError(std::string msg,
                           SourceLoc w = SourceLoc::current()) {
  return Status(Code::kTimeout, std::move(msg), w);
}
inline Status internalError(std::string msg,
                            SourceLoc w = SourceLoc::current()) {
  return Status(Code::kInternal, std::move(msg), w);
}

// A failed system call: "<call>(<what>): <strerror(err)>". `err` defaults to errno.
Status errnoStatus(std::string_view call, std::string_view what, int err = -1,
                   SourceLoc w = SourceLoc::current());

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace chorus

#define CHORUS_STATUS_CONCAT_INNER(a, b) a##b
#define CHORUS_STATUS_CONCAT(a, b) CHORUS_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` (a Status or StatusOr) is not ok.
#define CHORUS_RETURN_IF_ERROR(expr)                                          \
  do {                                                                        \
    auto chorus_status_or_ = (expr);                                          \
    if (!chorus_status_or_.ok()) return ::chorus::detail::toStatus(chorus_status_or_); \
  } while (0)

// `lhs = value of expr`, or return its error.
#define CHORUS_ASSIGN_OR_RETURN(lhs, expr)                                          \
  auto CHORUS_STATUS_CONCAT(chorus_sor_, __LINE__) = (expr);                        \
  if (!CHORUS_STATUS_CONCAT(chorus_sor_, __LINE__).ok())                            \
    return CHORUS_STATUS_CONCAT(chorus_sor_, __LINE__).status();                    \
  lhs = std::move(CHORUS_STATUS_CONCAT(chorus_sor_, __LINE__)).value()

namespace chorus::detail {
inline Status toStatus(const Status& s) { return s; }
template <typename T>
Status toStatus(const StatusOr<T>& s) {
  return s.status();
}
}  // namespace chorus::detail
