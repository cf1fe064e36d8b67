// errors.h — the typed error every native layer throws. The addon turns it into a JS EmbshardError
// carrying the same stable `code` (the list of codes is mirrored in lib/errors.ts).
#pragma once
#include <cstdio>
#include <stdexcept>
#include <string>

namespace embshard {

class Error : public std::runtime_error {
 public:
  Error(std::string code, const std::string& message) : std::runtime_error(message), code_(std::move(code)) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

// printf-style message formatting for error sites.
template <typename... Args>
std::string format(const char* fmt, Args... args) {
  int n = std::snprintf(nullptr, 0, fmt, args...);
  std::string s(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::snprintf(&s[0], static_cast<size_t>(n) + 1, fmt, args...);
  return s;
}

template <typename... Args>
[[noreturn]] void fail(const char* code, const char* fmt, Args... args) {
  throw Error(code, format(fmt, args...));
}

}  // namespace embshard
