// SPDX-License-Identifier: Apache-2.0
#include "dspipe/status.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace dspipe {
namespace {

constexpr std::string_view kOpen = "{{", kClose = "}}";

}  // namespace

std::string Opt(std::string_view field, std::string_view value) {
  std::string m(kOpen);
  m += field;
  if (!value.empty()) {
    m += '=';
    m += value;
  }
  m += kClose;
  return m;
}

std::string RenderOptions(std::string_view text, const OptionNamer& namer) {
  std::string out;
  out.reserve(text.size());
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find(kOpen, at);
    const size_t close = open == std::string_view::npos ? open : text.find(kClose, open + 2);
    if (close == std::string_view::npos) break;
    out.append(text.substr(at, open - at));
    const std::string_view marker = text.substr(open + 2, close - open - 2);
    const size_t eq = marker.find('=');
    const std::string_view fields = marker.substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : marker.substr(eq + 1);
    // "A,B": two fields a front end may show as one option (Python's size=(h, w)): named once
    // when both render the same, else "a and b".
    const size_t comma = fields.find(',');
    if (comma == std::string_view::npos) {
      out += namer(fields, value);
    } else {
      const std::string a = namer(fields.substr(0, comma), value);
      const std::string b = namer(fields.substr(comma + 1), value);
      out += a == b ? a : a + " and " + b;
    }
    at = close + 2;
  }
  out.append(text.substr(std::min(at, text.size())));
  return out;
}

std::string CppOptionName(std::string_view field, std::string_view value) {
  std::string s(field);
  if (!value.empty()) {
    s += " = ";
    s += value;
  }
  return s;
}

Status::Status(Code code, std::string_view msg) {
  if (code == Code::kOk) return;
  state_ = std::make_unique<State>();
  state_->code = code;
  state_->raw = std::string(msg);
  state_->msg = RenderOptions(msg, CppOptionName);
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

const std::string& Status::key() const noexcept {
  static const std::string kEmpty;
  return state_ ? state_->key : kEmpty;
}

const std::string& Status::path() const noexcept {
  static const std::string kEmpty;
  return state_ ? state_->path : kEmpty;
}

const char* Status::CodeName(Code c) noexcept {
  switch (c) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kNotFound:
      return "NotFound";
    case Code::kCorruption:
      return "Corruption";
    case Code::kIOError:
      return "IOError";
    case Code::kBadInput:
      return "BadInput";
    case Code::kAlreadyExists:
      return "AlreadyExists";
    case Code::kUnsupported:
      return "Unsupported";
    case Code::kAborted:
      return "Aborted";
    case Code::kInternal:
      return "Internal";
    case Code::kCancelled:
      return "Cancelled";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(state_->code)) + ": " + state_->msg;
}

std::string Status::Render(const OptionNamer& namer) const {
  if (ok()) return "OK";
  return std::string(CodeName(state_->code)) + ": " + RenderOptions(state_->raw, namer);
}

Status Status::WithRaw(std::string raw) const {
  if (ok()) return Status();
  Status s(state_->code, raw);
  s.state_->key = state_->key;
  s.state_->path = state_->path;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return Status();
  std::string m(context);
  m += ": ";
  m += state_->raw;
  return WithRaw(std::move(m));
}

Status Status::Append(std::string_view text) const {
  if (ok()) return Status();
  return WithRaw(state_->raw + std::string(text));
}

Status Status::WithKey(std::string_view key) const {
  Status s = *this;
  if (s.state_) s.state_->key = std::string(key);
  return s;
}

Status Status::WithPath(std::string_view path) const {
  Status s = *this;
  if (s.state_) s.state_->path = std::string(path);
  return s;
}

}  // namespace dspipe
