// Status and Result<T>: the channel for expected failures (bad input, missing or corrupt files,
// unsupported models). Broken invariants use CHECK (check.h) instead.
//
// A Status carries a code and a message written for the person who must act on it: it names the
// file, tensor or field, says what was expected and what was found, and where possible what to do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "core/check.h"

namespace kiln {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,    // the caller passed something malformed (a flag, a request field)
  kNotFound,           // a file, tensor or key that should exist does not
  kIoError,            // the operating system refused a read, write or map
  kCorrupt,            // a file exists but its contents contradict themselves
  kUnsupported,        // well-formed input that kiln does not handle (yet): architecture, dtype
  kOutOfRange,         // an index, offset or size outside what is allowed
  kResourceExhausted,  // memory or another resource ran out
  kUnavailable,        // a service (network registry, GPU) cannot be reached now
  kInternal,           // a failure inside kiln that is not the caller's fault
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "<CodeName>: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; an OK status stays OK.
  Status WithContext(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Constructors for the common codes; the message should name the thing that failed.
inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status Corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Result<T> holds either a T or a non-OK Status.
//
// REQUIRES: a Result is never built from an OK Status (CHECKed). value() on an error aborts;
// test ok() first or use KILN_ASSIGN_OR_RETURN.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    CHECK(!std::get<Status>(v_).ok()) << "Result built from an OK Status";
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }

  T& value() & {
    CHECK(ok()) << "Result::value() on error: " << status().ToString();
    return std::get<T>(v_);
  }
  const T& value() const& {
    CHECK(ok()) << "Result::value() on error: " << status().ToString();
    return std::get<T>(v_);
  }
  T&& value() && {
    CHECK(ok()) << "Result::value() on error: " << status().ToString();
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kiln

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function when `expr` (a Status) is not OK.
#define KILN_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::kiln::Status kiln_status_ = (expr);        \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (0)

// `lhs` = value of `rexpr` (a Result<T>), or returns its Status from the enclosing function.
#define KILN_ASSIGN_OR_RETURN(lhs, rexpr) \
  KILN_ASSIGN_OR_RETURN_IMPL_(KILN_CONCAT_(kiln_result_, __LINE__), lhs, rexpr)
#define KILN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
