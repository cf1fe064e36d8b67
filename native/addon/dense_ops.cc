// dense_ops.cc — `denseOps`: the dense layers one by one, synchronous, for checking each kernel
// against an independent reference (gradient checks, every GEMM backend and precision) and for small utilities.
// Training goes through DenseModel (dense_model.cc), whose calls run off the event loop; these are
// meant for small inputs only.
#include <napi.h>

#include "addon/dense_js_readers.h"
#include "addon/dense_layer_args.h"
#include "addon/errors.h"
#include "addon/registry.h"
#include "core/value_scan.h"
#include "dense/activation.h"
#include "dense/cross.h"
#include "dense/gemm.h"
#include "dense/interaction.h"
#include "dense/linear.h"
#include "dense/loss.h"
#include "dense/optimizer.h"

namespace embshard::addon {
namespace {

namespace da = dense_js_readers;
namespace oa = dense_layer_args;
using oa::make;

// A backend name: 'onednn' | 'openblas' | 'naive'.
dense::GemmBackend backend_arg(Napi::Env env, Napi::Value v, const std::string& field) {
  std::string name = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  for (auto b : {dense::GemmBackend::OneDNN, dense::GemmBackend::OpenBLAS, dense::GemmBackend::Naive})
    if (name == dense::gemm_backend_name(b)) return b;
  throw_error(env, "INVALID_ARGUMENT", field + " must be 'onednn' | 'openblas' | 'naive' (got '" + name + "')");
}

// gemm(transA, transB, M, N, K, alpha, A, B, beta, C, { backend?, precision?, bias?, relu?, batch? }) — C
// updated in place: C_i = act(alpha·op(A_i)·op(B_i) + bias + beta·C_i) for each of `batch` matrices.
Napi::Value Gemm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = info[10].IsObject() ? info[10].As<Napi::Object>() : Napi::Object::New(env);
  int64_t batch = o.Get("batch").IsUndefined() ? 1 : da::integer(env, o.Get("batch"), "batch", 1, 1 << 20);
  oa::GemmArgs a = oa::read_gemm(info, 0, batch);
  dense::GemmCall g;
  g.transA = a.ta;
  g.transB = a.tb;
  g.M = a.M;
  g.N = a.N;
  g.K = a.K;
  g.A = a.A.Data();
  g.lda = a.ta ? a.M : a.K;
  g.B = a.B.Data();
  g.ldb = a.tb ? a.K : a.N;
  g.C = a.C.Data();
  g.ldc = a.N;
  g.alpha = a.alpha;
  g.beta = a.beta;
  g.batch = batch;
  g.strideA = a.M * a.K;
  g.strideB = a.K * a.N;
  g.strideC = a.M * a.N;
  g.precision = da::precision(env, o.Get("precision"), "precision");
  g.relu = o.Get("relu").ToBoolean();
  if (!o.Get("bias").IsUndefined() && !o.Get("bias").IsNull()) g.bias = da::f32(env, o.Get("bias"), "bias", a.N).Data();
  if (o.Get("backend").IsUndefined()) guard(env, [&] { dense::gemm(g); });
  else {
    dense::GemmBackend b = backend_arg(env, o.Get("backend"), "backend");
    guard(env, [&] { dense::gemm_on(b, g); });
  }
  return env.Undefined();
}

// gemmInfo() -> { backend, reason, built: { onednn, openblas, naive } }
Napi::Value GemmInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("backend", dense::gemm_backend_name(dense::gemm_backend()));
  o.Set("reason", dense::gemm_backend_reason());
  Napi::Object built = Napi::Object::New(env);
  for (auto b : {dense::GemmBackend::OneDNN, dense::GemmBackend::OpenBLAS, dense::GemmBackend::Naive})
    built.Set(dense::gemm_backend_name(b), dense::gemm_backend_built(b));
  o.Set("built", built);
  return o;
}

// forceGemmBackend(name | null): every dense layer on that backend (null: the default again).
Napi::Value ForceGemmBackend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info[0].IsNull() || info[0].IsUndefined()) dense::gemm_force_none();
  else {
    dense::GemmBackend b = backend_arg(env, info[0], "backend");
    guard(env, [&] { dense::gemm_force_backend(b); });
  }
  return env.Undefined();
}

// linearForward(x, B, in, out, W, b | null, relu?, precision?) -> y
Napi::Value LinearForward(const Napi::CallbackInfo& info) {
  oa::LinearForwardArgs a = oa::read_linear_forward(info);
  bool relu = info[6].ToBoolean();
  dense::Precision p = da::precision(info.Env(), info[7], "precision");
  dense::linear_forward(a.x.Data(), a.B, a.in, a.out, a.W.Data(), a.b, relu, p, a.y.Data());
  return a.y;
}

// linearBackward(x, dy, B, in, out, W, precision?) -> { dW, db, dx }
Napi::Value LinearBackward(const Napi::CallbackInfo& info) {
  oa::LinearBackwardArgs a = oa::read_linear_backward(info);
  dense::Precision p = da::precision(info.Env(), info[6], "precision");
  dense::linear_backward(a.x.Data(), a.dy.Data(), a.B, a.in, a.out, a.W.Data(), a.dW.Data(), a.db.Data(), a.dx.Data(), p);
  return a.result(info.Env());
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
  oa::ElementwiseArgs a = oa::read_elementwise(info, "y", "dy");
  dense::relu_backward(a.first.Data(), a.second.Data(), a.out.Data(), a.n);
  return a.out;
}

// dotInteractionForward(x, e, B, d, F, precision?) -> out ;
// dotInteractionBackward(x, e, dout, B, d, F, precision?) -> { dx, de }
Napi::Value DotForward(const Napi::CallbackInfo& info) {
  oa::DotForwardArgs a = oa::read_dot_forward(info);
  dense::Precision p = da::precision(info.Env(), info[5], "precision");
  dense::dot_interaction_forward(a.x.Data(), a.e.Data(), a.B, a.d, a.F, p, a.out.Data());
  return a.out;
}
Napi::Value DotBackward(const Napi::CallbackInfo& info) {
  oa::DotBackwardArgs a = oa::read_dot_backward(info);
  dense::Precision p = da::precision(info.Env(), info[6], "precision");
  dense::dot_interaction_backward(a.x.Data(), a.e.Data(), a.dout.Data(), a.B, a.d, a.F, p, a.dx.Data(), a.de.Data());
  return a.result(info.Env());
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

// crossForward(x0, B, D, r, layers, precision?) -> out
Napi::Value CrossForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t B = da::integer(env, info[1], "B", 1, 1 << 20), D = da::integer(env, info[2], "D", 1, 1 << 20),
          r = da::integer(env, info[3], "r", 1, 1 << 16);
  auto x0 = da::f32(env, info[0], "x0", B * D);
  auto layers = cross_layers(env, info[4], D, r);
  dense::Precision p = da::precision(env, info[5], "precision");
  dense::CrossCache cache;
  auto out = make(env, B * D);
  dense::cross_forward(x0.Data(), B, D, r, layers, p, cache, out.Data());
  return out;
}

// crossBackward(x0, dout, B, D, r, layers, precision?) -> { dx0, layers: [{ V, U, b }] }
Napi::Value CrossBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t B = da::integer(env, info[2], "B", 1, 1 << 20), D = da::integer(env, info[3], "D", 1, 1 << 20),
          r = da::integer(env, info[4], "r", 1, 1 << 16);
  auto x0 = da::f32(env, info[0], "x0", B * D), dout = da::f32(env, info[1], "dout", B * D);
  auto layers = cross_layers(env, info[5], D, r);
  dense::Precision p = da::precision(env, info[6], "precision");
  dense::CrossCache cache;
  dense::cross_forward(x0.Data(), B, D, r, layers, p, cache, nullptr);
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
  dense::cross_backward(dout.Data(), B, D, r, layers, p, cache, grads, dx0.Data());
  Napi::Object o = Napi::Object::New(env);
  o.Set("dx0", dx0);
  o.Set("layers", ga);
  return o;
}

// bce(z, y) -> { loss, dz }
Napi::Value Bce(const Napi::CallbackInfo& info) {
  oa::ElementwiseArgs a = oa::read_elementwise(info, "z", "y");
  double loss = dense::bce_with_logits(a.first.Data(), a.second.Data(), a.n, a.out.Data());
  return a.loss_result(info.Env(), loss);
}

// firstOutside(a: Float32Array, lo, hi): the index of the first value outside [lo, hi] (NaN included), or -1
Napi::Value FirstOutside(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Float32Array a = da::f32(env, info[0], "firstOutside: a", -1);
  const double lo = da::number(env, info[1], "firstOutside: lo"), hi = da::number(env, info[2], "firstOutside: hi");
  return Napi::Number::New(env, static_cast<double>(first_outside(a.Data(), static_cast<int64_t>(a.ElementLength()), static_cast<float>(lo), static_cast<float>(hi))));
}

// optimizerStep({ type, lr, eps, beta1, beta2, weightDecay }, t, params, grads, state) — in place.
Napi::Value OptimizerStep(const Napi::CallbackInfo& info) {
  oa::OptimizerStepArgs a = oa::read_optimizer_step(info);
  dense::dense_optimizer_step(a.c, a.c.lr, a.t, a.p.Data(), a.g.Data(), a.s.Data(), a.n);
  return info.Env().Undefined();
}

void Init(Napi::Env env, Napi::Object exports) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("gemm", Napi::Function::New(env, Gemm));
  o.Set("gemmInfo", Napi::Function::New(env, GemmInfo));
  o.Set("forceGemmBackend", Napi::Function::New(env, ForceGemmBackend));
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
  o.Set("firstOutside", Napi::Function::New(env, FirstOutside));
  exports.Set("denseOps", o);
}
Part part("dense_ops", &Init);

}  // namespace
}  // namespace embshard::addon
