// errors.h — native → JS errors: every failure reaches JS as the EmbshardError class that lib/native.ts
// hands to the addon at load time (the better-sqlite3 pattern), with the same `code`.
#pragma once
#include <napi.h>

#include <string>

namespace embshard::addon {

// Builds an EmbshardError (falls back to Error with a `code` property before the class is set).
Napi::Error make_error(Napi::Env env, const std::string& code, const std::string& message);

// Throws make_error(...) as a JS exception (NODE_ADDON_API_CPP_EXCEPTIONS: throws Napi::Error).
[[noreturn]] void throw_error(Napi::Env env, const std::string& code, const std::string& message);

// Wraps a synchronous binding body: embshard::Error and std::exception become EmbshardError.
template <typename F>
auto guard(Napi::Env env, F&& body) -> decltype(body());

}  // namespace embshard::addon

#include "core/errors.h"

namespace embshard::addon {
template <typename F>
auto guard(Napi::Env env, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const Napi::Error&) {
    throw;
  } catch (const embshard::Error& e) {
    throw_error(env, e.code(), e.what());
  } catch (const std::bad_alloc&) {
    throw_error(env, "ALLOC_FAILED", "out of memory");
  } catch (const std::exception& e) {
    throw_error(env, "INTERNAL", e.what());
  }
}
}  // namespace embshard::addon
