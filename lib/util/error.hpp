// Error types shared by the whole library.
//
// Two tiers (as in ccache): low-level code returns std::expected<T, Error>; the application
// layer throws tune::Fatal, which main() catches once and prints as `tune: error: ...`.
#pragma once

#include <expected>
#include <stdexcept>
#include <string>

namespace tune {

// A failure a caller can report: one line naming what failed, where, and why.
struct Error {
  std::string message;
};

template <typename T>
using Result = std::expected<T, Error>;

// Shorthand for returning an error: `return fail("cannot read '", path, "': ", why);`
template <typename... Args>
[[nodiscard]] std::unexpected<Error> fail(Args&&... args) {
  std::string s;
  (s.append(std::string_view(args)), ...);
  return std::unexpected(Error{std::move(s)});
}

// Process exit codes of the `tune` command.
enum ExitCode : int {
  kExitOk = 0,
  kExitTrialError = 1,
  kExitUsage = 2,
  kExitInterrupted = 130,
};

// Thrown by the application layer; main() prints `tune: error: <what>` and exits with `code`.
class Fatal : public std::runtime_error {
 public:
  explicit Fatal(const std::string& what, int code = kExitUsage)
      : std::runtime_error(what), code_(code) {}
  Fatal(const Error& e, int code = kExitUsage) : Fatal(e.message, code) {}
  [[nodiscard]] int code() const { return code_; }

 private:
  int code_;
};

}  // namespace tune
