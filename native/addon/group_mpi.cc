// group_mpi.cc — binding: mpiAvailable (whether this build has the MPI group) and createMpiGroup(timeoutMs)
// -> a handle whose ready() settles once MPI is initialised and the world communicator duplicated.
#include "addon/errors.h"
#include "addon/group_wrap.h"
#include "addon/registry.h"

#if defined(EMBSHARD_WITH_MPI)
#include "comm/mpi/mpi_group.h"
#endif

namespace embshard::addon {
namespace {

Napi::Value CreateMpiGroup(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
#if defined(EMBSHARD_WITH_MPI)
    double timeout = timeout_arg(env, info[0], "createMpiGroup");
    return GroupWrap::Create(env, nullptr, [timeout] { return comm::MpiGroup::create_world(comm::Deadline::after(timeout)); });
#else
    throw_error(env, "BACKEND_UNAVAILABLE",
                "this embshard build has no MPI process group (MPI was not found when it was compiled: install "
                "libopenmpi-dev and rebuild)");
#endif
  });
}

void Init(Napi::Env env, Napi::Object exports) {
#if defined(EMBSHARD_WITH_MPI)
  exports.Set("mpiAvailable", Napi::Boolean::New(env, true));
#else
  exports.Set("mpiAvailable", Napi::Boolean::New(env, false));
#endif
  exports.Set("createMpiGroup", Napi::Function::New(env, CreateMpiGroup, "createMpiGroup"));
}

Part part("group_mpi", &Init);

}  // namespace
}  // namespace embshard::addon
