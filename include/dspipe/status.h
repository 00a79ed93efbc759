// dspipe::Status: the result of every fallible dspipe call.
//
// An OK status carries no allocation. A failed one carries a code and a message that names the
// file or key it is about and the reason, e.g.
//   "Corruption: key 00000000000000a7 in data.lmdb: checksum mismatch (stored 1f2e.., computed ..)"
// Statuses are cheap to move and safe to copy; they are not thread-safe to mutate concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace dspipe {

// [[nodiscard]]: a dropped Status is a dropped error. Where ignoring one is right, say why
// with (void) and a comment.
class [[nodiscard]] Status {
 public:
  enum class Code : int {
    kOk = 0,
    kInvalidArgument = 1,  // bad options or flags
    kNotFound = 2,         // missing file, key or database
    kCorruption = 3,       // data on disk fails a check (checksum, header, decode)
    kIOError = 4,          // the OS said no (open/read/write/fsync/rename/ENOSPC)
    kBadInput = 5,         // a source file is unusable (truncated, wrong size, multi-channel mask)
    kAlreadyExists = 6,    // output exists and neither --resume nor --overwrite was given
    kUnsupported = 7,      // a valid request this build or machine cannot serve
    kAborted = 8,          // stopped on request or after too many errors
    kInternal = 9,         // a bug in dspipe
  };

  Status() noexcept = default;
  Status(Code code, std::string_view msg);
  Status(const Status& o) : state_(o.state_ ? std::make_unique<State>(*o.state_) : nullptr) {}
  Status& operator=(const Status& o) {
    if (this != &o) state_ = o.state_ ? std::make_unique<State>(*o.state_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string_view m) { return {Code::kInvalidArgument, m}; }
  static Status NotFound(std::string_view m) { return {Code::kNotFound, m}; }
  static Status Corruption(std::string_view m) { return {Code::kCorruption, m}; }
  static Status IOError(std::string_view m) { return {Code::kIOError, m}; }
  // IOError naming a path and errno's text: "IOError: write /x/y: No space left on device".
  static Status IOErrorErrno(std::string_view op, std::string_view path, int err);
  static Status BadInput(std::string_view m) { return {Code::kBadInput, m}; }
  static Status AlreadyExists(std::string_view m) { return {Code::kAlreadyExists, m}; }
  static Status Unsupported(std::string_view m) { return {Code::kUnsupported, m}; }
  static Status Aborted(std::string_view m) { return {Code::kAborted, m}; }
  static Status Internal(std::string_view m) { return {Code::kInternal, m}; }

  bool ok() const noexcept { return state_ == nullptr; }
  Code code() const noexcept { return state_ ? state_->code : Code::kOk; }
  // The message without the code prefix ("" when OK).
  const std::string& message() const noexcept;
  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;
  // A copy with "context: " put in front of the message (no-op when OK).
  Status WithContext(std::string_view context) const;

  static const char* CodeName(Code c) noexcept;

 private:
  struct State {
    Code code;
    std::string msg;
  };
  std::unique_ptr<State> state_;
};

// Thrown by APIs that cannot return a Status (iterators, constructors); carries the Status.
class Error : public std::exception {
 public:
  explicit Error(Status s) : status_(std::move(s)), what_(status_.ToString()) {}
  const char* what() const noexcept override { return what_.c_str(); }
  const Status& status() const noexcept { return status_; }

 private:
  Status status_;
  std::string what_;
};

}  // namespace dspipe

// Returns early from the enclosing function with the status when it is not OK.
#define DSPIPE_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::dspipe::Status _dspipe_s = (expr);        \
    if (!_dspipe_s.ok()) return _dspipe_s;      \
  } while (0)
