// dense_ops.cc — `denseOps`: the dense layers one by one, synchronous, for checking each kernel
// against an independent reference (gradient checks, BLAS vs blocked GEMM) and for small utilities.
// Training goes through DenseModel (dense_model.cc), whose calls run off the event loop; these are
// meant for small inputs only.
#include <napi.h>

#include "addon/dense_args.h"
#include "addon/errors.h"
#include "addon/registry.h"
#include "dense/activation.h"
#include "dense/cross.h"
#include "dense/gemm.h"
#include "dense/interaction.h"
#include "dense/linear.h"
#include "dense/loss.h"
#include "dense/optimizer.h"

namespace embshard::addon {
namespace {

namespace da = dense_args;
using Napi::Float32Array;

Float32Array make(Napi::Env env, int64_t n) { return Float32Array::New(env, static_cast<size_t>(n)); }

// gemm(transA, transB, M, N, K, alpha, A, B, beta, C, fallback?) — C updated in place.
Napi::Value Gemm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool ta = info[0].ToBoolean(), tb = info[1].ToBoolean();
  int64_t M = da::integer(env, info[2], "M", 0, 1 << 20), N = da::integer(env, info[3], "N", 0, 1 << 20),
          K = da::integer(env, info[4], "K", 0, 1 << 20);
  float alpha = static_cast<float>(da::number(env, info[5], "alpha"));
  auto A = da::f32(env, info[6], "A", M * K), B = da::f32(env, info[7], "B", K * N);
  float beta = static_cast<float>(da::number(env, info[8], "beta"));
  auto C = da::f32(env, info[9], "C", M * N);
  bool fallback = info[10].ToBoolean();
  int64_t lda = ta ? M : K, ldb = tb ? K : N;
  if (fallback) dense::sgemm_blocked(ta, tb, M, N, K, alpha, A.Data(), lda, B.Data(), ldb, beta, C.Data(), N);
  else dense::sgemm(ta, tb, M, N, K, alpha, A.Data(), lda, B.Data(), ldb, beta, C.Data(), N);
  return env.Undefined();
}

Napi::Value GemmInfo(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("blas", dense::gemm_has_blas());
  o.Set("fallbackForced", dense::gemm_fallback_forced());
  return o;
}

Napi::Value ForceGemmFallback(const Napi::CallbackInfo& info) {
  dense::gemm_force_fallback(info[0].ToBoolean());
  return info.Env().Undefined();
}

// linearForward(x, B, in, out, W, b | null) -> y
Napi::Value LinearForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t B = da::integer(env, info[1], "B", 1, 1 << 20), in = da::integer(env, info[2], "in", 1, 1 << 20),
          out = da::integer(env, info[3], "out", 1, 1 << 20);
  auto x = da::f32(env, info[0], "x", B * in), W = da::f32(env, info[4], "W", out * in);
  const float* b = info[5].IsNull() || info[5].IsUndefined() ? nullptr : da::f32(env, info[5], "b", out).Data();
  auto y = make(env, B * out);
  dense::linear_forward(x.Data(), B, in, out, W.Data(), b, y.Data());
  return y;
}

// linearBackward(x, dy, B, in, out, W) -> { dW, db, dx }
Napi::Value LinearBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t B = da::integer(env, info[2], "B", 1, 1 << 20), in = da::integer(env, info[3], "in", 1, 1 << 20),
          out = da::integer(env, info[4], "out", 1, 1 << 20);
  auto x = da::f32(env, info[0], "x", B * in), dy = da::f32(env, info[1], "dy", B * out), W = da::f32(env, info[5], "W", out * in);
  auto dW = make(env, out * in), db = make(env, out), dx = make(env, B * in);
  dense::linear_backward(x.Data(), dy.Data(), B, in, out, W.Data(), dW.Data(), db.Data(), dx.Data());
  Napi::Object o = Napi::Object::New(env);
  o.Set("dW", dW);
  o.Set("db", db);
  o.Set("dx", dx);
  return o;
}

// reluForward(x) -> y ; reluBackward(y, dy) -> dx
Napi::Value ReluForward(const Napi::CallbackInfo& info) {
  auto x = da::f32(info.Env(), info[0], "x", -1);
  auto y = make(info.Env(), static_cast<int64_t>(x.ElementLength()));
  std::copy(x.Data(), x.Data() + x.ElementLength(), y.Data());
  dense::relu_forward(y.Data(), static_cast<int64_t>(y.ElementLength()));
  return y;
}
Napi::Value ReluBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto y = da::f32(env, info[0], "y", -1);
  auto dy = da::f32(env, info[1], "dy", static_cast<int64_t>(y.ElementLength()));
  auto dx = make(env, static_cast<int64_t>(y.ElementLength()));
  dense::relu_backward(y.Data(), dy.Data(), dx.Data(), static_cast<int64_t>(y.ElementLength()));
  return dx;
}

// dotInteractionForward(x, e, B, d, F) -> out ; dotInteractionBackward(x, e, dout, B, d, F) -> { dx, de }
Napi::Value DotForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t B = da::integer(env, info[2], "B", 1, 1 << 20), d = da::integer(env, info[3], "d", 1, 1 << 16),
          F = da::integer(env, info[4], "F", 0, 4096);
  auto x = da::f32(env, info[0], "x", B * d), e = da::f32(env, info[1], "e", B * F * d);
  auto out = make(env, B * dense::dot_interaction_width(d, F));
  dense::dot_interaction_forward(x.Data(), e.Data(), B, d, F, out.Data());
  return out;
}
Napi::Value DotBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t B = da::integer(env, info[3], "B", 1, 1 << 20), d = da::integer(env, info[4], "d", 1, 1 << 16),
          F = da::integer(env, info[5], "F", 0, 4096);
  auto x = da::f32(env, info[0], "x", B * d), e = da::f32(env, info[1], "e", B * F * d),
       dout = da::f32(env, info[2], "dout", B * dense::dot_interaction_width(d, F));
  auto dx = make(env, B * d), de = make(env, B * F * d);
  dense::dot_interaction_backward(x.Data(), e.Data(), dout.Data(), B, d, F, dx.Data(), de.Data());
  Napi::Object o = Napi::Object::New(env);
  o.Set("dx", dx);
  o.Set("de", de);
  return o;
}

// Cross layers: layers = [{ V [r×D], U [D×r], b [D] }, ...]
std::vector<dense::CrossLayerParams> cross_layers(Napi::Env env, Napi::Value v, int64_t D, int64_t r) {
  if (!v.IsArray()) throw_error(env, "INVALID_ARGUMENT", "layers must be an array of { V, U, b }");
  Napi::Array a = v.As<Napi::Array>();
  std::vector<dense::CrossLayerParams> out;
  for (uint32_t i = 0; i < a.Length(); ++i) {
    if (!a.Get(i).IsObject()) throw_error(env, "INVALID_ARGUMENT", "layers[" + std::to_string(i) + "] must be { V, U, b }");
    Napi::Object o = a.Get(i).As<Napi::Object>();
    std::string p = "layers[" + std::to_string(i) + "].";
    out.push_back({da::f32(env, o.Get("V"), p + "V", r * D).Data(), da::f32(env, o.Get("U"), p + "U", D * r).Data(),
                   da::f32(env, o.Get("b"), p + "b", D).Data()});
  }
  return out;
}

// crossForward(x0, B, D, r, layers) -> out
Napi::Value CrossForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t B = da::integer(env, info[1], "B", 1, 1 << 20), D = da::integer(env, info[2], "D", 1, 1 << 20),
          r = da::integer(env, info[3], "r", 1, 1 << 16);
  auto x0 = da::f32(env, info[0], "x0", B * D);
  auto layers = cross_layers(env, info[4], D, r);
  dense::CrossCache cache;
  auto out = make(env, B * D);
  dense::cross_forward(x0.Data(), B, D, r, layers, cache, out.Data());
  return out;
}

// crossBackward(x0, dout, B, D, r, layers) -> { dx0, layers: [{ V, U, b }] }
Napi::Value CrossBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t B = da::integer(env, info[2], "B", 1, 1 << 20), D = da::integer(env, info[3], "D", 1, 1 << 20),
          r = da::integer(env, info[4], "r", 1, 1 << 16);
  auto x0 = da::f32(env, info[0], "x0", B * D), dout = da::f32(env, info[1], "dout", B * D);
  auto layers = cross_layers(env, info[5], D, r);
  dense::CrossCache cache;
  dense::cross_forward(x0.Data(), B, D, r, layers, cache, nullptr);
  Napi::Array ga = Napi::Array::New(env, layers.size());
  std::vector<dense::CrossLayerGrads> grads;
  for (size_t l = 0; l < layers.size(); ++l) {
    auto V = make(env, r * D), U = make(env, D * r), b = make(env, D);
    grads.push_back({V.Data(), U.Data(), b.Data()});
    Napi::Object o = Napi::Object::New(env);
    o.Set("V", V);
    o.Set("U", U);
    o.Set("b", b);
    ga.Set(static_cast<uint32_t>(l), o);
  }
  auto dx0 = make(env, B * D);
  dense::cross_backward(dout.Data(), B, D, r, layers, cache, grads, dx0.Data());
  Napi::Object o = Napi::Object::New(env);
  o.Set("dx0", dx0);
  o.Set("layers", ga);
  return o;
}

// bce(z, y) -> { loss, dz }
Napi::Value Bce(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto z = da::f32(env, info[0], "z", -1);
  auto y = da::f32(env, info[1], "y", static_cast<int64_t>(z.ElementLength()));
  auto dz = make(env, static_cast<int64_t>(z.ElementLength()));
  double loss = dense::bce_with_logits(z.Data(), y.Data(), static_cast<int64_t>(z.ElementLength()), dz.Data());
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
  dense::DenseOptConfig c;
  std::string type = o.Get("type").IsString() ? o.Get("type").As<Napi::String>().Utf8Value() : "";
  guard(env, [&] { c.type = dense::parse_dense_opt(type); });
  c.lr = static_cast<float>(da::number(env, o.Get("lr"), "lr"));
  c.eps = static_cast<float>(da::number_or(env, o, "eps", 1e-8, "eps"));
  c.beta1 = static_cast<float>(da::number_or(env, o, "beta1", 0.9, "beta1"));
  c.beta2 = static_cast<float>(da::number_or(env, o, "beta2", 0.999, "beta2"));
  c.weightDecay = static_cast<float>(da::number_or(env, o, "weightDecay", 0.0, "weightDecay"));
  int64_t t = da::integer(env, info[1], "t", 1, 1ll << 53);
  auto p = da::f32(env, info[2], "params", -1);
  int64_t n = static_cast<int64_t>(p.ElementLength());
  auto g = da::f32(env, info[3], "grads", n);
  auto s = da::f32(env, info[4], "state", dense::dense_state_floats(c.type, n));
  dense::dense_optimizer_step(c, c.lr, t, p.Data(), g.Data(), s.Data(), n);
  return env.Undefined();
}

void Init(Napi::Env env, Napi::Object exports) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("gemm", Napi::Function::New(env, Gemm));
  o.Set("gemmInfo", Napi::Function::New(env, GemmInfo));
  o.Set("forceGemmFallback", Napi::Function::New(env, ForceGemmFallback));
  o.Set("linearForward", Napi::Function::New(env, LinearForward));
  o.Set("linearBackward", Napi::Function::New(env, LinearBackward));
  o.Set("reluForward", Napi::Function::New(env, ReluForward));
  o.Set("reluBackward", Napi::Function::New(env, ReluBackward));
  o.Set("dotInteractionForward", Napi::Function::New(env, DotForward));
  o.Set("dotInteractionBackward", Napi::Function::New(env, DotBackward));
  o.Set("crossForward", Napi::Function::New(env, CrossForward));
  o.Set("crossBackward", Napi::Function::New(env, CrossBackward));
  o.Set("bce", Napi::Function::New(env, Bce));
  o.Set("optimizerStep", Napi::Function::New(env, OptimizerStep));
  exports.Set("denseOps", o);
}
Part part("dense_ops", &Init);

}  // namespace
}  // namespace embshard::addon
