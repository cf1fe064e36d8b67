// model.h — the whole dense half of a DLRM / DCNv2 model on the CPU:
//   bottom MLP (Linear+ReLU per layer) over the dense features
//   → interaction with the pooled embeddings (dot | cross | concat)
//   → top MLP (Linear+ReLU, the last layer Linear only) → one logit per sample → sigmoid + BCE.
// Parameters, gradients and optimizer state live in three flat float buffers owned by the caller
// (the addon hands it JS Float32Arrays, so gradients can be all-reduced in place and saved without
// copies). One call at a time per model (the addon enforces it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dense/cross.h"
#include "dense/optimizer.h"
#include "dense/precision.h"

namespace embshard::dense {

enum class Interaction : uint8_t { Dot = 0, Cross = 1, Concat = 2 };

struct DenseModelSpec {
  int64_t denseIn = 13;
  std::vector<int64_t> bottom;  // output width of each bottom layer (the last is the embedding dim for 'dot')
  int64_t numSparse = 0;        // F pooled embedding features
  int64_t embDim = 0;           // d: width of each pooled feature
  Interaction interaction = Interaction::Dot;
  int64_t crossLayers = 0;
  int64_t crossRank = 0;
  std::vector<int64_t> top;  // output width of each top layer; the last must be 1
  uint64_t seed = 0;
  DenseOptConfig optimizer;
  Precision precision = Precision::FP32;  // of every GEMM; parameters, gradients and state stay fp32
};

struct TensorInfo {
  std::string name;  // e.g. bottom.0.weight, cross.1.V, top.2.bias
  int64_t offset = 0;
  std::vector<int64_t> shape;
  int64_t size() const {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    return n;
  }
};

struct StepTimes {
  double forwardMs = 0;
  double backwardMs = 0;
};

class DenseModel {
 public:
  // Validates the spec (INVALID_CONFIG / INVALID_SIZE naming the bad field) and lays out the tensors.
  explicit DenseModel(DenseModelSpec spec);

  const DenseModelSpec& spec() const { return spec_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  int64_t param_count() const { return paramCount_; }
  int64_t state_count() const { return dense_state_floats(spec_.optimizer.type, paramCount_); }
  int64_t sparse_width() const { return spec_.numSparse * spec_.embDim; }
  int64_t interaction_width() const;

  // The caller's buffers: params [param_count], grads [param_count], state [state_count].
  void bind(float* params, float* grads, float* state) {
    params_ = params;
    grads_ = grads;
    state_ = state;
  }
  // Deterministic initialisation from spec.seed (a pure function of seed, tensor and element); state zeroed.
  void initialize();

  // The bottom MLP alone over dense [B × denseIn] (it needs no embeddings, so it can run while they are
  // looked up and exchanged); its output is kept for the next forward / forward_backward called with
  // bottomReady on the same `dense` and B. t->forwardMs ← its time.
  void forward_bottom(const float* dense, int64_t B, StepTimes* t = nullptr);
  // logits [B]; dense [B × denseIn], sparse [B × sparse_width]. bottomReady: reuse forward_bottom's output
  // (INVALID_ARGUMENT unless it ran on this `dense` and B since the last forward or update).
  void forward(const float* dense, const float* sparse, int64_t B, float* logits, StepTimes* t = nullptr, bool bottomReady = false);
  // Forward + backward: returns the mean BCE loss; grads ← gradScale · ∂loss/∂params; sparseGrad (may be
  // null) ← gradScale · ∂loss/∂sparse [B × sparse_width]; logits (may be null) ← the forward's logits.
  double forward_backward(const float* dense, const float* sparse, const float* labels, int64_t B, float gradScale,
                          float* sparseGrad, float* logits, StepTimes* t = nullptr, bool bottomReady = false);
  // One optimizer update at 1-based step `t` with learning rate lr.
  void apply(float lr, int64_t t);

 private:
  void layout();
  void run_bottom(const float* dense, int64_t B);
  void run_forward(const float* dense, const float* sparse, int64_t B, bool bottomReady);
  const float* P(size_t tensor) const { return params_ + tensors_[tensor].offset; }
  float* G(size_t tensor) const { return grads_ + tensors_[tensor].offset; }

  DenseModelSpec spec_;
  std::vector<TensorInfo> tensors_;
  int64_t paramCount_ = 0;
  size_t bottomT_ = 0, crossT_ = 0, topT_ = 0;  // first tensor index of each part
  float* params_ = nullptr;
  float* grads_ = nullptr;
  float* state_ = nullptr;

  // activations of the last forward pass
  const float* in_ = nullptr;
  // the input and batch size of a forward_bottom not yet consumed (nullptr: none)
  const float* bottomFor_ = nullptr;
  int64_t bottomB_ = 0;
  const float* sparse_ = nullptr;
  std::vector<std::vector<float>> bot_, top_;
  std::vector<float> inter_;
  CrossCache cross_;
  std::vector<float> g1_, g2_, gx_;
};

}  // namespace embshard::dense
