// module.cc — the addon's entry point: runs the Init of every registered part (registry.h).
#include <napi.h>

#include "addon/registry.h"

namespace {
Napi::Object Init(Napi::Env env, Napi::Object exports) {
  for (const auto& p : embshard::addon::parts()) p.init(env, exports);
#if defined(EMBSHARD_WITH_CUDA)
  exports.Set("variant", Napi::String::New(env, "cuda"));
#else
  exports.Set("variant", Napi::String::New(env, "cpu"));
#endif
  return exports;
}
}  // namespace

NODE_API_MODULE(EMBSHARD_ADDON_NAME, Init)
