// dense_layer_args.h — the arguments of the per-layer op bindings of the CPU and GPU
// (dense_ops.cc `denseOps`, dense_cuda_ops.cc `denseCudaOps`): each reader checks one op's JS arguments
// in a fixed order (so the first bad field named is the same on both), throwing EmbshardError naming the
// field before any work, then allocates the op's output arrays; the result builders shape what JS gets.
#pragma once
#include <napi.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "addon/dense_js_readers.h"
#include "addon/errors.h"
#include "dense/interaction.h"
#include "dense/optimizer.h"

namespace embshard::addon::dense_layer_args {

namespace da = dense_js_readers;
using Napi::Float32Array;

inline Float32Array make(Napi::Env env, int64_t n) { return Float32Array::New(env, static_cast<size_t>(n)); }

// { name: array, ... }: what a backward op returns.
inline Napi::Object named(Napi::Env env, std::initializer_list<std::pair<const char*, Napi::Value>> fields) {
  Napi::Object o = Napi::Object::New(env);
  for (const auto& f : fields) o.Set(f.first, f.second);
  return o;
}

// gemm(transA, transB, M, N, K, alpha, A, B, beta, C, ...): C [M×N] is updated in place; M, N, K >= minDim;
// A, B and C hold `batch` matrices each, back to back.
struct GemmArgs {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 0, beta = 0;
  Float32Array A, B, C;
};
inline GemmArgs read_gemm(const Napi::CallbackInfo& info, int64_t minDim, int64_t batch = 1) {
  Napi::Env env = info.Env();
  GemmArgs a;
  a.ta = info[0].ToBoolean();
  a.tb = info[1].ToBoolean();
  a.M = da::integer(env, info[2], "M", minDim, 1 << 20);
  a.N = da::integer(env, info[3], "N", minDim, 1 << 20);
  a.K = da::integer(env, info[4], "K", minDim, 1 << 20);
  a.alpha = static_cast<float>(da::number(env, info[5], "alpha"));
  a.A = da::f32(env, info[6], "A", batch * a.M * a.K);
  a.B = da::f32(env, info[7], "B", batch * a.K * a.N);
  a.beta = static_cast<float>(da::number(env, info[8], "beta"));
  a.C = da::f32(env, info[9], "C", batch * a.M * a.N);
  return a;
}

// A linear layer's B, in, out from info[at], info[at + 1], info[at + 2].
inline void read_linear_dims(const Napi::CallbackInfo& info, size_t at, int64_t& B, int64_t& in, int64_t& out) {
  B = da::integer(info.Env(), info[at], "B", 1, 1 << 20);
  in = da::integer(info.Env(), info[at + 1], "in", 1, 1 << 20);
  out = da::integer(info.Env(), info[at + 2], "out", 1, 1 << 20);
}

// linearForward(x, B, in, out, W, b | null, ...) -> y [B×out]
struct LinearForwardArgs {
  int64_t B = 0, in = 0, out = 0;
  Float32Array x, W, y;
  const float* b = nullptr;
};
inline LinearForwardArgs read_linear_forward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  LinearForwardArgs a;
  read_linear_dims(info, 1, a.B, a.in, a.out);
  a.x = da::f32(env, info[0], "x", a.B * a.in);
  a.W = da::f32(env, info[4], "W", a.out * a.in);
  a.b = info[5].IsNull() || info[5].IsUndefined() ? nullptr : da::f32(env, info[5], "b", a.out).Data();
  a.y = make(env, a.B * a.out);
  return a;
}

// linearBackward(x, dy, B, in, out, W) -> { dW, db, dx }
struct LinearBackwardArgs {
  int64_t B = 0, in = 0, out = 0;
  Float32Array x, dy, W, dW, db, dx;
  Napi::Object result(Napi::Env env) const { return named(env, {{"dW", dW}, {"db", db}, {"dx", dx}}); }
};
inline LinearBackwardArgs read_linear_backward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  LinearBackwardArgs a;
  read_linear_dims(info, 2, a.B, a.in, a.out);
  a.x = da::f32(env, info[0], "x", a.B * a.in);
  a.dy = da::f32(env, info[1], "dy", a.B * a.out);
  a.W = da::f32(env, info[5], "W", a.out * a.in);
  a.dW = make(env, a.out * a.in);
  a.db = make(env, a.out);
  a.dx = make(env, a.B * a.in);
  return a;
}

// Two arrays of one length in, one of that length out: reluBackward(y, dy) -> dx; bce(z, y) -> { loss, dz }.
struct ElementwiseArgs {
  int64_t n = 0;
  Float32Array first, second, out;
  Napi::Object loss_result(Napi::Env env, double loss) const {  // bce's { loss, dz }
    return named(env, {{"loss", Napi::Number::New(env, loss)}, {"dz", out}});
  }
};
inline ElementwiseArgs read_elementwise(const Napi::CallbackInfo& info, const char* first, const char* second) {
  Napi::Env env = info.Env();
  ElementwiseArgs a;
  a.first = da::f32(env, info[0], first, -1);
  a.n = static_cast<int64_t>(a.first.ElementLength());
  a.second = da::f32(env, info[1], second, a.n);
  a.out = make(env, a.n);
  return a;
}

// The dot interaction's B, d, F from info[dims .. dims + 2], then its inputs x [B × d], e [B × F·d] from
// info[0], info[1].
template <typename Args>
inline void read_dot_inputs(const Napi::CallbackInfo& info, size_t dims, Args& a) {
  Napi::Env env = info.Env();
  a.B = da::integer(env, info[dims], "B", 1, 1 << 20);
  a.d = da::integer(env, info[dims + 1], "d", 1, 1 << 16);
  a.F = da::integer(env, info[dims + 2], "F", 0, 4096);
  a.x = da::f32(env, info[0], "x", a.B * a.d);
  a.e = da::f32(env, info[1], "e", a.B * a.F * a.d);
}

// dotInteractionForward(x, e, B, d, F) -> out [B × dot_interaction_width(d, F)]
struct DotForwardArgs {
  int64_t B = 0, d = 0, F = 0;
  Float32Array x, e, out;
};
inline DotForwardArgs read_dot_forward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DotForwardArgs a;
  read_dot_inputs(info, 2, a);
  a.out = make(env, a.B * dense::dot_interaction_width(a.d, a.F));
  return a;
}

// dotInteractionBackward(x, e, dout, B, d, F) -> { dx, de }
struct DotBackwardArgs {
  int64_t B = 0, d = 0, F = 0;
  Float32Array x, e, dout, dx, de;
  Napi::Object result(Napi::Env env) const { return named(env, {{"dx", dx}, {"de", de}}); }
};
inline DotBackwardArgs read_dot_backward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DotBackwardArgs a;
  read_dot_inputs(info, 3, a);
  a.dout = da::f32(env, info[2], "dout", a.B * dense::dot_interaction_width(a.d, a.F));
  a.dx = make(env, a.B * a.d);
  a.de = make(env, a.B * a.F * a.d);
  return a;
}

// optimizerStep({ type, lr, eps, beta1, beta2, weightDecay }, t, params, grads, state) — in place.
struct OptimizerStepArgs {
  dense::DenseOptConfig c;
  int64_t t = 0, n = 0;
  Float32Array p, g, s;
};
inline OptimizerStepArgs read_optimizer_step(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) throw_error(env, "INVALID_ARGUMENT", "config must be an object");
  OptimizerStepArgs a;
  a.c = da::opt_config(env, info[0].As<Napi::Object>(), "");
  a.t = da::integer(env, info[1], "t", 1, 1ll << 53);
  a.p = da::f32(env, info[2], "params", -1);
  a.n = static_cast<int64_t>(a.p.ElementLength());
  a.g = da::f32(env, info[3], "grads", a.n);
  a.s = da::f32(env, info[4], "state", dense::dense_state_floats(a.c.type, a.n));
  return a;
}

}  // namespace embshard::addon::dense_layer_args
