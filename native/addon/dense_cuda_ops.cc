// dense_cuda_ops.cc — `denseCudaOps` (CUDA addon only): the GPU twins of the dense layers on host
// arrays (copied to the device, run, copied back), synchronous, so the same references that check the
// CPU layers check the GPU ones. Every input is validated before any device work.
#if defined(EMBSHARD_WITH_CUDA)
#include <napi.h>

#include "addon/dense_args.h"
#include "addon/errors.h"
#include "addon/registry.h"
#include "dense/cuda/dense_cuda.h"
#include "dense/interaction.h"
#include "dense/optimizer.h"

namespace embshard::addon {
namespace {

namespace da = dense_args;
namespace dc = dense::cuda;
using Napi::Float32Array;

Float32Array make(Napi::Env env, int64_t n) { return Float32Array::New(env, static_cast<size_t>(n)); }

Napi::Value Available(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), dc::device_available()); }

Napi::Value Gemm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool ta = info[0].ToBoolean(), tb = info[1].ToBoolean();
  int64_t M = da::integer(env, info[2], "M", 1, 1 << 20), N = da::integer(env, info[3], "N", 1, 1 << 20),
          K = da::integer(env, info[4], "K", 1, 1 << 20);
  float alpha = static_cast<float>(da::number(env, info[5], "alpha"));
  auto A = da::f32(env, info[6], "A", M * K), B = da::f32(env, info[7], "B", K * N);
  float beta = static_cast<float>(da::number(env, info[8], "beta"));
  auto C = da::f32(env, info[9], "C", M * N);
  guard(env, [&] { dc::gemm_host(ta, tb, M, N, K, alpha, A.Data(), B.Data(), beta, C.Data()); });
  return env.Undefined();
}

// linearForward(x, B, in, out, W, b | null, relu?) -> y
Napi::Value LinearForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t B = da::integer(env, info[1], "B", 1, 1 << 20), in = da::integer(env, info[2], "in", 1, 1 << 20),
          out = da::integer(env, info[3], "out", 1, 1 << 20);
  auto x = da::f32(env, info[0], "x", B * in), W = da::f32(env, info[4], "W", out * in);
  const float* b = info[5].IsNull() || info[5].IsUndefined() ? nullptr : da::f32(env, info[5], "b", out).Data();
  bool relu = info[6].ToBoolean();
  auto y = make(env, B * out);
  guard(env, [&] { dc::linear_forward_host(x.Data(), B, in, out, W.Data(), b, relu, y.Data()); });
  return y;
}

Napi::Value LinearBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t B = da::integer(env, info[2], "B", 1, 1 << 20), in = da::integer(env, info[3], "in", 1, 1 << 20),
          out = da::integer(env, info[4], "out", 1, 1 << 20);
  auto x = da::f32(env, info[0], "x", B * in), dy = da::f32(env, info[1], "dy", B * out), W = da::f32(env, info[5], "W", out * in);
  auto dW = make(env, out * in), db = make(env, out), dx = make(env, B * in);
  guard(env, [&] { dc::linear_backward_host(x.Data(), dy.Data(), B, in, out, W.Data(), dW.Data(), db.Data(), dx.Data()); });
  Napi::Object o = Napi::Object::New(env);
  o.Set("dW", dW);
  o.Set("db", db);
  o.Set("dx", dx);
  return o;
}

Napi::Value ReluBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto y = da::f32(env, info[0], "y", -1);
  int64_t n = static_cast<int64_t>(y.ElementLength());
  auto dy = da::f32(env, info[1], "dy", n);
  auto dx = make(env, n);
  guard(env, [&] { dc::relu_backward_host(y.Data(), dy.Data(), dx.Data(), n); });
  return dx;
}

Napi::Value DotForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t B = da::integer(env, info[2], "B", 1, 1 << 20), d = da::integer(env, info[3], "d", 1, 1 << 16),
          F = da::integer(env, info[4], "F", 0, 4096);
  auto x = da::f32(env, info[0], "x", B * d), e = da::f32(env, info[1], "e", B * F * d);
  auto out = make(env, B * dense::dot_interaction_width(d, F));
  guard(env, [&] { dc::dot_interaction_forward_host(x.Data(), e.Data(), B, d, F, out.Data()); });
  return out;
}

Napi::Value DotBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t B = da::integer(env, info[3], "B", 1, 1 << 20), d = da::integer(env, info[4], "d", 1, 1 << 16),
          F = da::integer(env, info[5], "F", 0, 4096);
  auto x = da::f32(env, info[0], "x", B * d), e = da::f32(env, info[1], "e", B * F * d),
       dout = da::f32(env, info[2], "dout", B * dense::dot_interaction_width(d, F));
  auto dx = make(env, B * d), de = make(env, B * F * d);
  guard(env, [&] { dc::dot_interaction_backward_host(x.Data(), e.Data(), dout.Data(), B, d, F, dx.Data(), de.Data()); });
  Napi::Object o = Napi::Object::New(env);
  o.Set("dx", dx);
  o.Set("de", de);
  return o;
}

Napi::Value Bce(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto z = da::f32(env, info[0], "z", -1);
  int64_t n = static_cast<int64_t>(z.ElementLength());
  auto y = da::f32(env, info[1], "y", n);
  auto dz = make(env, n);
  double loss = 0;
  guard(env, [&] { loss = dc::bce_host(z.Data(), y.Data(), n, dz.Data()); });
  Napi::Object o = Napi::Object::New(env);
  o.Set("loss", loss);
  o.Set("dz", dz);
  return o;
}

// optimizerStep({ type, lr, eps, beta1, beta2, weightDecay }, t, params, grads, state) — in place.
Napi::Value OptimizerStep(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) throw_error(env, "INVALID_ARGUMENT", "config must be an object");
  Napi::Object o = info[0].As<Napi::Object>();
  std::string type = o.Get("type").IsString() ? o.Get("type").As<Napi::String>().Utf8Value() : "";
  dense::DenseOpt t = dense::DenseOpt::SGD;
  guard(env, [&] { t = dense::parse_dense_opt(type); });
  float lr = static_cast<float>(da::number(env, o.Get("lr"), "lr"));
  float eps = static_cast<float>(da::number_or(env, o, "eps", 1e-8, "eps"));
  float b1 = static_cast<float>(da::number_or(env, o, "beta1", 0.9, "beta1"));
  float b2 = static_cast<float>(da::number_or(env, o, "beta2", 0.999, "beta2"));
  float wd = static_cast<float>(da::number_or(env, o, "weightDecay", 0.0, "weightDecay"));
  int64_t step = da::integer(env, info[1], "t", 1, 1ll << 53);
  auto p = da::f32(env, info[2], "params", -1);
  int64_t n = static_cast<int64_t>(p.ElementLength());
  auto g = da::f32(env, info[3], "grads", n);
  auto s = da::f32(env, info[4], "state", dense::dense_state_floats(t, n));
  guard(env, [&] { dc::optimizer_step_host(static_cast<int>(t), lr, eps, b1, b2, wd, step, p.Data(), g.Data(), s.Data(), n); });
  return env.Undefined();
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
