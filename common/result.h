// Result<T> and Status: errors as values inside hpctune.
//
// Every function that can fail in an expected way (a missing file, a peer that went away,
// SQLITE_BUSY, a bad config value) returns Result<T> or Status. Exceptions are used only at the
// edges: CLI main, HTTP handlers and thread entry points turn an Error into an exit code, an HTTP
// status or a log line. Tests compare Error::code(), never the message text.
//
// An Error carries a code, a message and a chain of context lines added on the way up
// ("while loading config.yaml" -> "while starting campaign"), as xgboost's collective::Result does.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace hpctune {

enum class Errc {
  kOk = 0,
  kInvalidArgument,  // a caller passed something malformed
  kConfig,           // a config or search-space error (exit code 2 at the CLI)
  kUsage,            // a CLI usage error (exit code 2)
  kNotFound,
  kIo,               // file or socket I/O failed
  kTimeout,          // a deadline passed
  kBusy,             // a resource is held by someone else (SQLITE_BUSY, a second master)
  kProtocol,         // a malformed, unknown or out-of-order message
  kPeerGone,         // the other side of a connection went away
  kCancelled,        // stopped on request (Ctrl-C, a stop message)
  kUnavailable,      // a backend or feature is not built in or not usable here
  kFailed,           // a trial or child process failed
  kInternal,         // a bug: an invariant did not hold
};

const char* errc_name(Errc code) noexcept;

class [[nodiscard]] Error {
 public:
  Error(Errc code, std::string message) : code_(code), message_(std::move(message)) {}

  Errc code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  const std::vector<std::string>& context() const noexcept { return context_; }

  // Adds a line of context, outermost last ("while resuming campaign 'x'").
  Error& with_context(std::string line) & {
    context_.push_back(std::move(line));
    return *this;
  }
  Error&& with_context(std::string line) && {
    context_.push_back(std::move(line));
    return std::move(*this);
  }

  // The message followed by the context chain, one "  while ..." line each.
  std::string to_string() const;

 private:
  Errc code_;
  std::string message_;
  std::vector<std::string> context_;
};

// Shorthand constructors: return hpctune::err(Errc::kIo, "cannot open " + path);
inline Error err(Errc code, std::string message) { return Error(code, std::move(message)); }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { assert(!ok()); return std::get<1>(v_); }
  Error&& error() && { assert(!ok()); return std::get<1>(std::move(v_)); }

  T value_or(T fallback) const& { return ok() ? std::get<0>(v_) : std::move(fallback); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  static Status Ok() { return Status(); }

  bool ok() const noexcept { return !error_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }
  const Error& error() const& { assert(!ok()); return *error_; }
  Error&& error() && { assert(!ok()); return std::move(*error_); }

 private:
  std::optional<Error> error_;
};

inline const char* errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::kOk: return "ok";
    case Errc::kInvalidArgument: return "invalid_argument";
    case Errc::kConfig: return "config";
    case Errc::kUsage: return "usage";
    case Errc::kNotFound: return "not_found";
    case Errc::kIo: return "io";
    case Errc::kTimeout: return "timeout";
    case Errc::kBusy: return "busy";
    case Errc::kProtocol: return "protocol";
    case Errc::kPeerGone: return "peer_gone";
    case Errc::kCancelled: return "cancelled";
    case Errc::kUnavailable: return "unavailable";
    case Errc::kFailed: return "failed";
    case Errc::kInternal: return "internal";
  }
  return "unknown";
}

inline std::string Error::to_string() const {
  std::string out = message_;
  for (const auto& line : context_) {
    out += "\n  ";
    out += line;
  }
  return out;
}

}  // namespace hpctune

// Propagates an error from an expression returning Status or Result<T>.
//   HPCTUNE_TRY(store.commit());
#define HPCTUNE_TRY(expr)                                   \
  do {                                                      \
    auto hpctune_try_result_ = (expr);                      \
    if (!hpctune_try_result_.ok())                          \
      return std::move(hpctune_try_result_).error();        \
  } while (0)

// Declares `lhs` from a Result<T> expression or returns its error.
//   HPCTUNE_ASSIGN(auto db, Store::open(path));
#define HPCTUNE_CONCAT_INNER_(a, b) a##b
#define HPCTUNE_CONCAT_(a, b) HPCTUNE_CONCAT_INNER_(a, b)
#define HPCTUNE_ASSIGN(lhs, expr) HPCTUNE_ASSIGN_IMPL_(lhs, expr, HPCTUNE_CONCAT_(hpctune_r_, __LINE__))
#define HPCTUNE_ASSIGN_IMPL_(lhs, expr, tmp)                \
  auto tmp = (expr);                                        \
  if (!tmp.ok()) return std::move(tmp).error();             \
  lhs = std::move(tmp).value()
