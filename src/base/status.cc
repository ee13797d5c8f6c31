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

Status::Status(Code code, std::string message, SourceLoc where) {
  // Code::kOk with a message is still ok: nothing to keep.
  if (code != Code::kOk)
    rep_ = std::make_unique<Rep>(Rep{code, std::move(message), where.file, where.line});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::toString() const {
  if (ok()) return "Success";
  std::string s = codeName(rep_->code);
  s += ": ";
  s += rep_->message;
  if (rep_->file && *rep_->file) {
    const char* base = std::strrchr(rep_->file, '/');
    s += " [";
    s += base ? base + 1 : rep_->file;
    s += ':';
    s += std::to_string(rep_->line);
    s += ']';
  }
  return s;
}

Status Status::withContext(std::string_view context) const {
  if (ok()) return Status();
  Status s = *this;
  std::string m(context);
  m += ": ";
  m += rep_->message;
  s.rep_->message = std::move(m);
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
