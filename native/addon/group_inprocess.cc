// group_inprocess.cc — binding: createInProcessGroups(n, ranksPerNode) -> n handles, the ranks of one
// in-process group (each with its own worker thread).
#include <cmath>

#include "addon/errors.h"
#include "addon/group_wrap.h"
#include "addon/registry.h"
#include "comm/inprocess_group.h"

namespace embshard::addon {
namespace {

Napi::Value CreateInProcessGroups(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsNumber() || !info[1].IsNumber())
      throw_error(env, "INVALID_ARGUMENT", "createInProcessGroups(size, ranksPerNode): both must be numbers");
    double n = info[0].As<Napi::Number>().DoubleValue(), rpn = info[1].As<Napi::Number>().DoubleValue();
    if (n != std::floor(n) || rpn != std::floor(rpn))
      throw_error(env, "INVALID_ARGUMENT", "createInProcessGroups: size and ranksPerNode must be integers");
    auto ranks = comm::InProcessGroup::create(static_cast<int>(n), static_cast<int>(rpn));
    Napi::Array out = Napi::Array::New(env, ranks.size());
    for (size_t r = 0; r < ranks.size(); ++r) out.Set(static_cast<uint32_t>(r), GroupWrap::Create(env, ranks[r], nullptr));
    return out;
  });
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("createInProcessGroups", Napi::Function::New(env, CreateInProcessGroups, "createInProcessGroups"));
}

Part part("group_inprocess", &Init);

}  // namespace
}  // namespace embshard::addon
