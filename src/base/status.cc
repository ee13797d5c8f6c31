#include "src/base/status.h"

#include <cerrno>
#include <cstring>

namespace chorus {

const char* codeName(Code code) {
  switch (code) {
    case Code::kOk: return "Success";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kInvalidUsage: return "InvalidUsage";
    case Code::kSystemError: return "SystemError";
    case Code::kRemoteError: return "RemoteError";
    case Code::kTimeout: return "Timeout";
    case Code::kInternal: return "InternalError";
    case Code::kInProgress: return "InProgress";
  }
  return "Unknown";
}

Status::Status(Code code, std::string message, SourceLoc where)
    : code_(code), message_(std::move(message)), file_(where.file), line_(where.line) {}

std::string Status::toString() const {
  if (ok()) return "Success";
  std::string s = codeName(code_);
  s += ": ";
  s += message_;
  if (file_ && *file_) {
    const char* base = std::strrchr(file_, '/');
    s += " [";
    s += base ? base + 1 : file_;
    s += ':';
    s += std::to_string(line_);
    s += ']';
  }
  return s;
}

Status Status::withContext(std::string_view context) const {
  if (ok()) return *this;
  Status s = *this;
  s.message_.assign(context);
  s.message_ += ": ";
  s.message_ += message_;
  return s;
}

Status errnoStatus(std::string_view call, std::string_view what, int err, SourceLoc w) {
  if (err < 0) err = errno;
  std::string msg(call);
  msg += "(";
  msg += what;
  msg += "): ";
  msg += std::strerror(err);
  return Status(Code::kSystemError, std::move(msg), w);
}

}  // namespace chorus
