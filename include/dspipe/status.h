// SPDX-License-Identifier: Apache-2.0
// dspipe::Status: the result of every fallible dspipe call.
//
// An OK status carries no allocation. A failed one carries a code and a message that names the
// file or key it is about and the reason, e.g.
//   "Corruption: key 00000000000000a7 in data.lmdb: checksum mismatch (stored 1f2e.., computed ..)"
// Statuses are cheap to move and safe to copy; they are not thread-safe to mutate concurrently.
//
// Options in messages. A message that names an option (one to fix, or the one to pass) writes
// it with Opt(): Opt("BuildOptions::resume", "true") puts the marker
// "{{BuildOptions::resume=true}}" in the text. message() and ToString() show it as the C++
// field ("BuildOptions::resume = true"); each front end renders it in its own language with
// Render(): dsconvert as its flag ("--resume"), Python as the keyword argument
// ("resume=True"). So one message serves every caller, and none of them reads another's names.
//
// Subjects. A failure about one record or one file can carry it apart from the text: key()
// (the record's key as Dataset::KeyName shows it) and path() (the file), for front ends that
// expose them (Python: dspipe.CorruptRecord.key / .path).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace dspipe {

// The marker naming option `field` ("Struct::field", as in dspipe/option_fields.h) in a
// message, with the value to set it to ("true", "skip", "4"; empty = the option itself).
// field may name two fields that go together, "LoaderOptions::height,LoaderOptions::width":
// rendered once where a front end shows them as one option (Python's size, dsbench's --size),
// else as "LoaderOptions::height and LoaderOptions::width".
std::string Opt(std::string_view field, std::string_view value = {});

// Renders one option marker: field ("BuildOptions::resume") and value ("" when none) -> text.
using OptionNamer = std::function<std::string(std::string_view field, std::string_view value)>;
// `text` with every marker replaced by namer(field, value).
std::string RenderOptions(std::string_view text, const OptionNamer& namer);
// The C++ rendering message() uses: "Struct::field", or "Struct::field = value".
std::string CppOptionName(std::string_view field, std::string_view value);

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
    kAborted = 8,          // could not go on: a lock held elsewhere, too many errors, no memory
    kInternal = 9,         // a bug in dspipe
    kCancelled = 10,       // stopped on request (FetchOptions::cancelled, a cache copy's cancel)
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
  // The one error of a stop on request: callers tell a cancellation apart by the code.
  static Status Cancelled(std::string_view m) { return {Code::kCancelled, m}; }

  bool ok() const noexcept { return state_ == nullptr; }
  Code code() const noexcept { return state_ ? state_->code : Code::kOk; }
  // The message without the code prefix ("" when OK), options named as C++ fields.
  const std::string& message() const noexcept;
  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;
  // ToString() with the options named by `namer` (a front end's names for them).
  std::string Render(const OptionNamer& namer) const;
  // A copy with "context: " put in front of the message (no-op when OK).
  Status WithContext(std::string_view context) const;
  // A copy with `text` appended to the message (no-op when OK).
  Status Append(std::string_view text) const;
  // The record key / file the failure is about ("" when not set); copies that set them (no-op
  // when OK). WithContext and Append keep them.
  const std::string& key() const noexcept;
  const std::string& path() const noexcept;
  Status WithKey(std::string_view key) const;
  Status WithPath(std::string_view path) const;

  static const char* CodeName(Code c) noexcept;

 private:
  struct State {
    Code code;
    std::string raw;  // the message with its option markers
    std::string msg;  // raw with the markers rendered by CppOptionName
    std::string key, path;
  };
  // A copy whose message is `raw` (subjects kept).
  Status WithRaw(std::string raw) const;
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
#define DSPIPE_RETURN_IF_ERROR(expr)       \
  do {                                     \
    ::dspipe::Status _dspipe_s = (expr);   \
    if (!_dspipe_s.ok()) return _dspipe_s; \
  } while (0)
