// dense_model_args.h — the arguments of the CPU and GPU dense-model bindings
// (dense_model.cc, dense_cuda_model.cc): the model config, the batch inputs of forward/forwardBackward
// (the GPU model also takes the pooled embeddings and their gradients as device buffers on its own
// device) and the update's learning rate. Each reader throws EmbshardError naming the field before any state
// changes or any work is queued.
#pragma once
#include <napi.h>

#include <cfloat>
#include <cstdint>
#include <string>
#include <utility>

#include "addon/dense_js_readers.h"
#include "addon/device_buffer.h"
#include "addon/errors.h"
#include "core/memory_overlap.h"
#include "core/value_scan.h"
#include "dense/model.h"

namespace embshard::addon::dense_model_args {

using dense::DenseModel;
using dense::DenseModelSpec;
namespace da = dense_js_readers;

inline DenseModelSpec read_dense_spec(Napi::Env env, Napi::Object c) {
  DenseModelSpec s;
  s.denseIn = da::integer(env, c.Get("denseIn"), "denseIn", 1, 1 << 20);
  s.bottom = da::widths(env, c.Get("bottom"), "bottom");
  s.top = da::widths(env, c.Get("top"), "top");
  s.numSparse = da::integer(env, c.Get("numSparse"), "numSparse", 0, 4096);
  s.embDim = c.Get("embDim").IsUndefined() ? 0 : da::integer(env, c.Get("embDim"), "embDim", 0, 65536);
  std::string inter = c.Get("interaction").IsString() ? c.Get("interaction").As<Napi::String>().Utf8Value() : "";
  if (inter == "dot") s.interaction = dense::Interaction::Dot;
  else if (inter == "cross") s.interaction = dense::Interaction::Cross;
  else if (inter == "concat") s.interaction = dense::Interaction::Concat;
  else throw_error(env, "INVALID_CONFIG", "interaction must be 'dot' | 'cross' | 'concat' (got '" + inter + "')");
  if (s.interaction == dense::Interaction::Cross) {
    s.crossLayers = da::integer(env, c.Get("crossLayers"), "crossLayers", 1, 64);
    s.crossRank = da::integer(env, c.Get("crossRank"), "crossRank", 1, 1 << 16);
  }
  s.seed = static_cast<uint64_t>(da::integer(env, c.Get("seed"), "seed", 0, (1ll << 53)));
  Napi::Value ov = c.Get("optimizer");
  if (!ov.IsObject()) throw_error(env, "INVALID_CONFIG", "optimizer must be an object { type, lr, ... }");
  s.optimizer = da::opt_config(env, ov.As<Napi::Object>(), "optimizer.");
  s.precision = da::precision(env, c.Get("precision"), "precision");
  return s;
}

// The pooled embeddings, or their gradients: a Float32Array, or (GPU model) a device buffer of f32 on the
// model's device.
struct SparseArg {
  Napi::Float32Array host;
  DeviceBuffer dev;
  Napi::Value array;  // the DeviceArray the device buffer came from (kept alive by the call)
  bool onDevice = false;
  float* ptr() const { return onDevice ? static_cast<float*>(dev.ptr) : host.IsEmpty() ? nullptr : const_cast<Napi::Float32Array&>(host).Data(); }
};

// `device` < 0: host arrays only (the CPU model); otherwise a device buffer on cuda:`device` is taken too.
inline SparseArg read_sparse(Napi::Env env, Napi::Value v, const std::string& field, int64_t n, int device) {
  SparseArg a;
  if (device >= 0 && v.IsObject() && !v.IsTypedArray()) {
    a.dev = read_device_buffer(env, v, field.c_str());
    if (a.dev.type != comm::ElemType::F32) throw_error(env, "INVALID_ARGUMENT", field + " must be a device buffer of f32");
    if (a.dev.device != device)
      throw_error(env, "INVALID_ARGUMENT", field + " is on cuda:" + std::to_string(a.dev.device) + ", the model on cuda:" + std::to_string(device));
    if (a.dev.count != n)
      throw_error(env, "LENGTH_MISMATCH", field + " has " + std::to_string(a.dev.count) + " elements; expected " + std::to_string(n));
    a.array = v;
    a.onDevice = true;
    return a;
  }
  a.host = da::f32(env, v, field, n);
  return a;
}

// Dense features must be finite: a NaN or ±Inf one leaves a ReLU as 0, so the logit would come out finite
// and wrong. INVALID_ARGUMENT naming the first bad value, its sample and feature.
inline void check_dense_values(Napi::Env env, const Napi::Float32Array& dense, int64_t denseIn) {
  const float* d = const_cast<Napi::Float32Array&>(dense).Data();
  const int64_t i = first_outside(d, static_cast<int64_t>(dense.ElementLength()), -FLT_MAX, FLT_MAX);
  if (i < 0) return;
  throw_error(env, "INVALID_ARGUMENT", "dense[" + std::to_string(i) + "] (sample " + std::to_string(i / denseIn) + ", feature " +
                                           std::to_string(i % denseIn) + ") is " + Napi::Number::New(env, d[i]).ToString().Utf8Value() +
                                           ": dense features must be finite");
}

// Pooled embeddings in host memory given to forward() must be finite too: through the interaction a NaN or
// ±Inf one reaches a ReLU of the top MLP, which leaves it as 0, so the logit would come out finite and
// wrong. (forwardBackward lets them through: its gradients come out NaN, which a trainer's step check
// refuses as NON_FINITE_GRADIENT; device arrays are read where they lie, unchecked.) INVALID_ARGUMENT
// naming the first bad value, its sample and column.
inline void check_pooled_values(Napi::Env env, const SparseArg& pooled, int64_t width) {
  if (pooled.onDevice || pooled.host.IsEmpty() || width == 0) return;
  const int64_t n = static_cast<int64_t>(pooled.host.ElementLength());
  const float* p = pooled.ptr();
  const int64_t i = first_outside(p, n, -FLT_MAX, FLT_MAX);
  if (i < 0) return;
  throw_error(env, "INVALID_ARGUMENT", "pooled[" + std::to_string(i) + "] (sample " + std::to_string(i / width) + ", column " +
                                           std::to_string(i % width) + ") is " + Napi::Number::New(env, p[i]).ToString().Utf8Value() +
                                           ": pooled embeddings must be finite");
}

// Validated inputs of forward / forwardBackward.
struct Inputs {
  int64_t B = 0;
  Napi::Float32Array dense;
  SparseArg sparse;
};

inline Inputs read_inputs(Napi::Env env, const DenseModel& m, Napi::Value denseV, Napi::Value sparseV, Napi::Value bV, int device = -1) {
  Inputs in;
  in.B = da::integer(env, bV, "batchSize", 1, 1 << 24);
  in.dense = da::f32(env, denseV, "dense", in.B * m.spec().denseIn);
  check_dense_values(env, in.dense, m.spec().denseIn);
  if (m.sparse_width() > 0) in.sparse = read_sparse(env, sparseV, "sparse", in.B * m.sparse_width(), device);
  else if (!sparseV.IsNull() && !sparseV.IsUndefined()) in.sparse = read_sparse(env, sparseV, "sparse", 0, device);
  return in;
}

// forwardBottom(dense, batchSize): the dense features only (sparse left empty)
inline Inputs read_dense_input(Napi::Env env, const DenseModel& m, Napi::Value denseV, Napi::Value bV) {
  Inputs in;
  in.B = da::integer(env, bV, "batchSize", 1, 1 << 24);
  in.dense = da::f32(env, denseV, "dense", in.B * m.spec().denseIn);
  check_dense_values(env, in.dense, m.spec().denseIn);
  return in;
}

// forwardBackward(dense, sparse, labels, batchSize, { sparseGrad?, logits?, gradScale?, bottomReady? })
struct FbArgs {
  Inputs in;
  Napi::Float32Array labels, logits;
  SparseArg sparseGrad;
  float gradScale = 1.0f;
  bool bottomReady = false;
};

// Whether two host arrays share memory (an empty or absent one shares none).
inline bool share_memory(Napi::Float32Array a, Napi::Float32Array b) {
  if (a.IsEmpty() || b.IsEmpty()) return false;
  return ranges_overlap(a.Data(), a.ByteLength(), b.Data(), b.ByteLength());
}

// The outputs (logits, sparseGrad) are written while the inputs are still read: INVALID_ARGUMENT naming both
// when an output shares memory with an input or with the other output (logits over labels would make the loss
// of the logits themselves; over dense, the first layer's weight gradients).
inline void check_outputs_apart(Napi::Env env, const FbArgs& a) {
  const std::pair<const char*, Napi::Float32Array> outs[] = {{"logits", a.logits}, {"sparseGrad", a.sparseGrad.host}};
  const std::pair<const char*, Napi::Float32Array> all[] = {
      {"dense", a.in.dense}, {"sparse", a.in.sparse.host}, {"labels", a.labels}, {"logits", a.logits}, {"sparseGrad", a.sparseGrad.host}};
  for (const auto& o : outs)
    for (const auto& x : all)
      if (std::string(o.first) != x.first && share_memory(o.second, x.second))
        throw_error(env, "INVALID_ARGUMENT", std::string(o.first) + " shares memory with " + x.first + ": an output must be an array of its own");
}

inline FbArgs read_fb_args(Napi::Env env, const DenseModel& m, const Napi::CallbackInfo& info, int device = -1) {
  FbArgs a;
  a.in = read_inputs(env, m, info[0], info[1], info[3], device);
  a.labels = da::f32(env, info[2], "labels", a.in.B);
  for (int64_t b = 0; b < a.in.B; ++b) {
    float y = a.labels.Data()[b];
    if (!(y >= 0.0f && y <= 1.0f))
      throw_error(env, "INVALID_ARGUMENT", "labels[" + std::to_string(b) + "] = " + std::to_string(y) + " is not in [0, 1]");
  }
  if (info[4].IsObject()) {
    Napi::Object o = info[4].As<Napi::Object>();
    if (!o.Get("sparseGrad").IsUndefined() && !o.Get("sparseGrad").IsNull())
      a.sparseGrad = read_sparse(env, o.Get("sparseGrad"), "sparseGrad", a.in.B * m.sparse_width(), device);
    if (!o.Get("logits").IsUndefined() && !o.Get("logits").IsNull()) a.logits = da::f32(env, o.Get("logits"), "logits", a.in.B);
    a.gradScale = static_cast<float>(da::number_or(env, o, "gradScale", 1.0, "gradScale"));
    Napi::Value br = o.Get("bottomReady");
    if (!br.IsUndefined()) {
      if (!br.IsBoolean()) throw_error(env, "INVALID_ARGUMENT", "bottomReady must be a boolean");
      a.bottomReady = br.As<Napi::Boolean>().Value();
    }
  }
  check_outputs_apart(env, a);
  return a;
}

// update(lr?): the configured rate when lr is undefined.
inline float read_lr(Napi::Env env, const DenseModel& m, Napi::Value v) {
  if (v.IsUndefined()) return m.spec().optimizer.lr;
  double lr = da::number(env, v, "lr");
  if (lr < 0) throw_error(env, "INVALID_ARGUMENT", "lr must be >= 0");
  return static_cast<float>(lr);
}

}  // namespace embshard::addon::dense_model_args
