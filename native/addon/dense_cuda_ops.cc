// dense_cuda_ops.cc — `denseCudaOps` (CUDA addon only): the GPU twins of the dense layers on host
// arrays (copied to the device, run, copied back), synchronous, so the same references that check the
// CPU layers check the GPU ones. Every input is validated before any device work.
#if defined(EMBSHARD_WITH_CUDA)
#include <napi.h>

#include "addon/dense_layer_args.h"
#include "addon/errors.h"
#include "addon/registry.h"
#include "dense/cuda/dense_cuda.h"
#include "dense/optimizer.h"

namespace embshard::addon {
namespace {

namespace dc = dense::cuda;
namespace oa = dense_layer_args;

Napi::Value Available(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), dc::device_available()); }

Napi::Value Gemm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  oa::GemmArgs a = oa::read_gemm(info, 1);
  guard(env, [&] { dc::gemm_host(a.ta, a.tb, a.M, a.N, a.K, a.alpha, a.A.Data(), a.B.Data(), a.beta, a.C.Data()); });
  return env.Undefined();
}

// linearForward(x, B, in, out, W, b | null, relu?) -> y
Napi::Value LinearForward(const Napi::CallbackInfo& info) {
  oa::LinearForwardArgs a = oa::read_linear_forward(info);
  bool relu = info[6].ToBoolean();
  guard(info.Env(), [&] { dc::linear_forward_host(a.x.Data(), a.B, a.in, a.out, a.W.Data(), a.b, relu, a.y.Data()); });
  return a.y;
}

Napi::Value LinearBackward(const Napi::CallbackInfo& info) {
  oa::LinearBackwardArgs a = oa::read_linear_backward(info);
  guard(info.Env(), [&] { dc::linear_backward_host(a.x.Data(), a.dy.Data(), a.B, a.in, a.out, a.W.Data(), a.dW.Data(), a.db.Data(), a.dx.Data()); });
  return a.result(info.Env());
}

Napi::Value ReluBackward(const Napi::CallbackInfo& info) {
  oa::ElementwiseArgs a = oa::read_elementwise(info, "y", "dy");
  guard(info.Env(), [&] { dc::relu_backward_host(a.first.Data(), a.second.Data(), a.out.Data(), a.n); });
  return a.out;
}

Napi::Value DotForward(const Napi::CallbackInfo& info) {
  oa::DotForwardArgs a = oa::read_dot_forward(info);
  guard(info.Env(), [&] { dc::dot_interaction_forward_host(a.x.Data(), a.e.Data(), a.B, a.d, a.F, a.out.Data()); });
  return a.out;
}

Napi::Value DotBackward(const Napi::CallbackInfo& info) {
  oa::DotBackwardArgs a = oa::read_dot_backward(info);
  guard(info.Env(), [&] { dc::dot_interaction_backward_host(a.x.Data(), a.e.Data(), a.dout.Data(), a.B, a.d, a.F, a.dx.Data(), a.de.Data()); });
  return a.result(info.Env());
}

Napi::Value Bce(const Napi::CallbackInfo& info) {
  oa::ElementwiseArgs a = oa::read_elementwise(info, "z", "y");
  double loss = 0;
  guard(info.Env(), [&] { loss = dc::bce_host(a.first.Data(), a.second.Data(), a.n, a.out.Data()); });
  return a.loss_result(info.Env(), loss);
}

// optimizerStep({ type, lr, eps, beta1, beta2, weightDecay }, t, params, grads, state) — in place.
Napi::Value OptimizerStep(const Napi::CallbackInfo& info) {
  oa::OptimizerStepArgs a = oa::read_optimizer_step(info);
  const dense::DenseOptConfig& c = a.c;
  guard(info.Env(), [&] {
    dc::optimizer_step_host(static_cast<int>(c.type), c.lr, c.eps, c.beta1, c.beta2, c.weightDecay, a.t, a.p.Data(), a.g.Data(), a.s.Data(), a.n);
  });
  return info.Env().Undefined();
}

void Init(Napi::Env env, Napi::Object exports) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("available", Napi::Function::New(env, Available));
  o.Set("gemm", Napi::Function::New(env, Gemm));
  o.Set("linearForward", Napi::Function::New(env, LinearForward));
  o.Set("linearBackward", Napi::Function::New(env, LinearBackward));
  o.Set("reluBackward", Napi::Function::New(env, ReluBackward));
  o.Set("dotInteractionForward", Napi::Function::New(env, DotForward));
  o.Set("dotInteractionBackward", Napi::Function::New(env, DotBackward));
  o.Set("bce", Napi::Function::New(env, Bce));
  o.Set("optimizerStep", Napi::Function::New(env, OptimizerStep));
  exports.Set("denseCudaOps", o);
}
Part part("dense_cuda_ops", &Init);

}  // namespace
}  // namespace embshard::addon
#endif  // EMBSHARD_WITH_CUDA
