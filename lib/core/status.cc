#include "dspipe/status.h"

#include <cstring>
#include <string>

namespace dspipe {

Status::Status(Code code, std::string_view msg) {
  if (code != Code::kOk) state_ = std::make_unique<State>(State{code, std::string(msg)});
}

Status Status::IOErrorErrno(std::string_view op, std::string_view path, int err) {
  std::string m(op);
  m += ' ';
  m += path;
  m += ": ";
  m += std::strerror(err);
  return Status(Code::kIOError, m);
}

const std::string& Status::message() const noexcept {
  static const std::string kEmpty;
  return state_ ? state_->msg : kEmpty;
}

const char* Status::CodeName(Code c) noexcept {
  switch (c) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kNotFound: return "NotFound";
    case Code::kCorruption: return "Corruption";
    case Code::kIOError: return "IOError";
    case Code::kBadInput: return "BadInput";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kUnsupported: return "Unsupported";
    case Code::kAborted: return "Aborted";
    case Code::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(state_->code)) + ": " + state_->msg;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return Status();
  std::string m(context);
  m += ": ";
  m += state_->msg;
  return Status(state_->code, m);
}

}  // namespace dspipe
