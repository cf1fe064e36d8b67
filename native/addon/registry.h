// registry.h — self-registration of the addon's parts: each binding file declares
//   static embshard::addon::Part part("name", &InitFn);
// and module.cc calls every registered Init at load time, so parts are added without editing module.cc.
#pragma once
#include <napi.h>

#include <vector>

namespace embshard::addon {

using InitFn = void (*)(Napi::Env env, Napi::Object exports);

struct PartEntry {
  const char* name;
  InitFn init;
};

inline std::vector<PartEntry>& parts() {
  static std::vector<PartEntry> v;
  return v;
}

struct Part {
  Part(const char* name, InitFn init) { parts().push_back({name, init}); }
};

}  // namespace embshard::addon
