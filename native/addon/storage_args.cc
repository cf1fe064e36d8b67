// storage_args.cc — the storage argument of the Engine constructor and disk-table counters (see
// storage_args.h).
#include "addon/storage_args.h"

#include <string>

#include "addon/errors.h"
#include "addon/js_args.h"

namespace embshard::addon {

std::vector<std::unique_ptr<storage::DiskStorageSpec>> parse_storage(Napi::Env env, const Napi::Value& v, size_t tables) {
  std::vector<std::unique_ptr<storage::DiskStorageSpec>> out;
  if (v.IsUndefined() || v.IsNull()) return out;
  if (!v.IsArray() || v.As<Napi::Array>().Length() != tables)
    throw_error(env, "INVALID_ARGUMENT", "the storage argument must be an array with one entry per table");
  Napi::Array a = v.As<Napi::Array>();
  bool any = false;
  out.resize(tables);
  for (uint32_t t = 0; t < tables; ++t) {
    Napi::Value e = a.Get(t);
    if (e.IsNull() || e.IsUndefined()) continue;
    if (!e.IsObject()) throw_error(env, "INVALID_ARGUMENT", "a storage entry must be null or an object");
    Napi::Object o = e.As<Napi::Object>();
    auto s = std::make_unique<storage::DiskStorageSpec>();
    s->file = string_arg(env, o.Get("file"), "storage.file");
    s->cacheBytes = static_cast<uint64_t>(int_arg(env, o.Get("cacheBytes"), "storage.cacheBytes", 1));
    const std::string policy = string_arg(env, o.Get("policy"), "storage.policy");
    if (policy != "lru" && policy != "lfu") throw_error(env, "INVALID_CONFIG", "storage.policy must be 'lru' or 'lfu'");
    s->policy = policy == "lfu" ? storage::Policy::LFU : storage::Policy::LRU;
    out[t] = std::move(s);
    any = true;
  }
  if (!any) out.clear();
  return out;
}

Napi::Object disk_stats_object(Napi::Env env, const storage::DiskTable& t) {
  const storage::DiskStats s = t.stats();
  Napi::Object o = Napi::Object::New(env);
  o.Set("hits", static_cast<double>(s.hits));
  o.Set("misses", static_cast<double>(s.misses));
  o.Set("evictions", static_cast<double>(s.evictions));
  o.Set("writebacks", static_cast<double>(s.writebacks));
  o.Set("prefetched", static_cast<double>(s.prefetched));
  o.Set("bytesRead", static_cast<double>(s.bytesRead));
  o.Set("bytesWritten", static_cast<double>(s.bytesWritten));
  o.Set("slots", static_cast<double>(t.slots()));
  o.Set("recordBytes", static_cast<double>(t.records().recordBytes));
  return o;
}

}  // namespace embshard::addon
