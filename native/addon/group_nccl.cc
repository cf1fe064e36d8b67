// group_nccl.cc — binding (CUDA addon built with NCCL only): ncclAvailable, ncclUniqueId() -> Uint8Array,
// createNcclGroup(uniqueId, rank, size, ranksPerNode, device, timeoutMs) -> a handle that is ready once
// every rank joined the communicator.
#include "addon/errors.h"
#include "addon/group_wrap.h"
#include "addon/registry.h"

#if defined(EMBSHARD_WITH_NCCL)
#include <cmath>
#include <cstring>
#include <vector>

#include "comm/nccl/nccl_group.h"
#endif

namespace embshard::addon {
namespace {

#if defined(EMBSHARD_WITH_NCCL)
Napi::Value UniqueId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    auto out = Napi::Uint8Array::New(env, NCCL_UNIQUE_ID_BYTES);
    comm::NcclGroup::unique_id(out.Data());
    return out;
  });
}


Napi::Value CreateNcclGroup(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    Bytes id = typed_bytes(env, info[0], "createNcclGroup: uniqueId");
    if (id.size != NCCL_UNIQUE_ID_BYTES)
      throw_error(env, "INVALID_ARGUMENT", format("createNcclGroup: uniqueId must hold %d bytes", NCCL_UNIQUE_ID_BYTES));
    int size = static_cast<int>(int_arg(env, info[2], "createNcclGroup: size", 1, 1 << 20));
    int rank = static_cast<int>(int_arg(env, info[1], "createNcclGroup: rank", 0, size - 1));
    int rpn = static_cast<int>(int_arg(env, info[3], "createNcclGroup: ranksPerNode", 1, size));
    int device = static_cast<int>(int_arg(env, info[4], "createNcclGroup: device", 0, 1 << 16));
    double timeout = timeout_arg(env, info[5], "createNcclGroup");
    auto idCopy = std::make_shared<std::vector<uint8_t>>(id.data, id.data + id.size);
    return GroupWrap::Create(env, nullptr, [idCopy, rank, size, rpn, device, timeout] {
      return comm::NcclGroup::create(idCopy->data(), rank, size, rpn, device, comm::Deadline::after(timeout));
    });
  });
}
#endif

void Init(Napi::Env env, Napi::Object exports) {
#if defined(EMBSHARD_WITH_NCCL)
  exports.Set("ncclAvailable", Napi::Boolean::New(env, true));
  exports.Set("ncclUniqueId", Napi::Function::New(env, UniqueId, "ncclUniqueId"));
  exports.Set("createNcclGroup", Napi::Function::New(env, CreateNcclGroup, "createNcclGroup"));
#else
  exports.Set("ncclAvailable", Napi::Boolean::New(env, false));
#endif
}

Part part("group_nccl", &Init);

}  // namespace
}  // namespace embshard::addon
