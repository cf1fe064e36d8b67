// model.cc — the dense model's layout, initialisation, forward/backward and update (see model.h).
#include "dense/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/errors.h"
#include "core/init.h"
#include "dense/activation.h"
#include "dense/interaction.h"
#include "dense/linear.h"
#include "dense/loss.h"

namespace embshard::dense {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
void check_widths(const std::vector<int64_t>& v, const char* field) {
  if (v.empty()) fail("INVALID_CONFIG", "%s must list at least one layer width", field);
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] <= 0 || v[i] > (1 << 20)) fail("INVALID_SIZE", "%s[%zu] = %lld is not a width in [1, 2^20]", field, i, static_cast<long long>(v[i]));
}
}  // namespace

DenseModel::DenseModel(DenseModelSpec spec) : spec_(std::move(spec)) {
  const auto& s = spec_;
  if (s.denseIn <= 0 || s.denseIn > (1 << 20)) fail("INVALID_SIZE", "denseIn = %lld must be in [1, 2^20]", static_cast<long long>(s.denseIn));
  check_widths(s.bottom, "bottom");
  check_widths(s.top, "top");
  if (s.top.back() != 1) fail("INVALID_CONFIG", "top must end in a layer of width 1 (the logit), got %lld", static_cast<long long>(s.top.back()));
  if (s.numSparse < 0 || s.numSparse > 4096) fail("INVALID_SIZE", "numSparse = %lld must be in [0, 4096]", static_cast<long long>(s.numSparse));
  if (s.numSparse > 0 && (s.embDim <= 0 || s.embDim > 65536))
    fail("INVALID_SIZE", "embDim = %lld must be in [1, 65536]", static_cast<long long>(s.embDim));
  if (s.interaction == Interaction::Dot && s.numSparse > 0 && s.embDim != s.bottom.back())
    fail("INVALID_CONFIG", "embDim (%lld) must equal the last bottom width (%lld) for the dot interaction",
         static_cast<long long>(s.embDim), static_cast<long long>(s.bottom.back()));
  if (s.interaction == Interaction::Cross) {
    if (s.crossLayers <= 0 || s.crossLayers > 64) fail("INVALID_SIZE", "crossLayers = %lld must be in [1, 64]", static_cast<long long>(s.crossLayers));
    if (s.crossRank <= 0 || s.crossRank > (1 << 16)) fail("INVALID_SIZE", "crossRank = %lld must be in [1, 65536]", static_cast<long long>(s.crossRank));
  }
  if (!(s.optimizer.lr >= 0.0f) || !std::isfinite(s.optimizer.lr)) fail("INVALID_CONFIG", "optimizer.lr must be a finite number >= 0");
  if (!(s.optimizer.eps > 0.0f) || !std::isfinite(s.optimizer.eps)) fail("INVALID_CONFIG", "optimizer.eps must be a finite number > 0");
  if (!(s.optimizer.beta1 >= 0.0f && s.optimizer.beta1 < 1.0f)) fail("INVALID_CONFIG", "optimizer.beta1 must be in [0, 1)");
  if (!(s.optimizer.beta2 >= 0.0f && s.optimizer.beta2 < 1.0f)) fail("INVALID_CONFIG", "optimizer.beta2 must be in [0, 1)");
  if (!(s.optimizer.weightDecay >= 0.0f) || !std::isfinite(s.optimizer.weightDecay))
    fail("INVALID_CONFIG", "optimizer.weightDecay must be a finite number >= 0");
  layout();
  // Parameters, gradients and state are each one Float32Array of at most 2^32 values: a larger model is
  // refused here, before anything is allocated (an allocation that large would end the process).
  constexpr int64_t kMaxBufferFloats = int64_t{1} << 32;
  if (paramCount_ > kMaxBufferFloats || state_count() > kMaxBufferFloats)
    fail("INVALID_SIZE", "the layer sizes give %lld parameters (optimizer state: %lld floats); at most 2^32 = %lld each",
         static_cast<long long>(paramCount_), static_cast<long long>(state_count()), static_cast<long long>(kMaxBufferFloats));
}

int64_t DenseModel::interaction_width() const {
  const auto& s = spec_;
  int64_t d = s.bottom.back();
  if (s.interaction == Interaction::Dot) return dot_interaction_width(d, s.numSparse);
  return d + s.numSparse * s.embDim;
}

void DenseModel::layout() {
  const auto& s = spec_;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    TensorInfo t{std::move(name), paramCount_, std::move(shape)};
    paramCount_ += t.size();
    tensors_.push_back(std::move(t));
  };
  bottomT_ = tensors_.size();
  int64_t in = s.denseIn;
  for (size_t i = 0; i < s.bottom.size(); ++i) {
    add("bottom." + std::to_string(i) + ".weight", {s.bottom[i], in});
    add("bottom." + std::to_string(i) + ".bias", {s.bottom[i]});
    in = s.bottom[i];
  }
  crossT_ = tensors_.size();
  int64_t D = interaction_width();
  if (s.interaction == Interaction::Cross) {
    for (int64_t l = 0; l < s.crossLayers; ++l) {
      add("cross." + std::to_string(l) + ".V", {s.crossRank, D});
      add("cross." + std::to_string(l) + ".U", {D, s.crossRank});
      add("cross." + std::to_string(l) + ".bias", {D});
    }
  }
  topT_ = tensors_.size();
  in = D;
  for (size_t i = 0; i < s.top.size(); ++i) {
    add("top." + std::to_string(i) + ".weight", {s.top[i], in});
    add("top." + std::to_string(i) + ".bias", {s.top[i]});
    in = s.top[i];
  }
}

void DenseModel::initialize() {
  // DLRM's initialisation: weights N(0, sqrt(2/(fan_in+fan_out))), biases N(0, sqrt(1/fan_out));
  // cross V and U likewise, cross biases zero.
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const auto& ti = tensors_[t];
    float stdev = 0.0f;
    bool isBias = ti.shape.size() == 1;
    bool isCross = ti.name.rfind("cross.", 0) == 0;
    if (!isBias) stdev = std::sqrt(2.0f / static_cast<float>(ti.shape[0] + ti.shape[1]));
    else if (!isCross) stdev = std::sqrt(1.0f / static_cast<float>(ti.shape[0]));
    float* p = params_ + ti.offset;
    const int64_t n = ti.size();
    for (int64_t i = 0; i < n; ++i)
      p[i] = stdev == 0.0f ? 0.0f : init_value(InitKind::Normal, 0.0f, stdev, spec_.seed, t, static_cast<uint64_t>(i));
  }
  std::fill(grads_, grads_ + paramCount_, 0.0f);
  std::fill(state_, state_ + state_count(), 0.0f);
}

void DenseModel::run_bottom(const float* dense, int64_t B) {
  const auto& s = spec_;
  bot_.resize(s.bottom.size());
  const float* x = dense;
  int64_t in = s.denseIn;
  for (size_t i = 0; i < s.bottom.size(); ++i) {
    auto& y = bot_[i];
    y.resize(static_cast<size_t>(B * s.bottom[i]));
    linear_forward(x, B, in, s.bottom[i], P(bottomT_ + 2 * i), P(bottomT_ + 2 * i + 1), true, s.precision, y.data());
    x = y.data();
    in = s.bottom[i];
  }
}

void DenseModel::forward_bottom(const float* dense, int64_t B, StepTimes* times) {
  auto t0 = std::chrono::steady_clock::now();
  bottomFor_ = nullptr;
  run_bottom(dense, B);
  bottomFor_ = dense;
  bottomB_ = B;
  if (times) times->forwardMs = ms_since(t0);
}

void DenseModel::run_forward(const float* dense, const float* sparse, int64_t B, bool bottomReady) {
  const auto& s = spec_;
  const bool ready = bottomFor_ == dense && bottomB_ == B;
  bottomFor_ = nullptr;
  if (bottomReady && !ready) fail("INVALID_ARGUMENT", "bottomReady: the bottom MLP has not run on this dense input and batch size (forwardBottom first)");
  in_ = dense;
  sparse_ = sparse;
  if (!bottomReady) run_bottom(dense, B);
  const float* x = bot_.back().data();
  const int64_t in = s.bottom.back();
  const int64_t D = interaction_width();
  inter_.resize(static_cast<size_t>(B * D));
  if (s.interaction == Interaction::Dot) dot_interaction_forward(x, sparse, B, in, s.numSparse, s.precision, inter_.data());
  else concat_forward(x, sparse, B, in, s.numSparse * s.embDim, inter_.data());
  const float* t = inter_.data();
  if (s.interaction == Interaction::Cross) {
    std::vector<CrossLayerParams> layers;
    for (int64_t l = 0; l < s.crossLayers; ++l)
      layers.push_back({P(crossT_ + 3 * l), P(crossT_ + 3 * l + 1), P(crossT_ + 3 * l + 2)});
    cross_forward(inter_.data(), B, D, s.crossRank, layers, s.precision, cross_, nullptr);
    t = cross_.xs.back().data();
  }
  top_.resize(s.top.size());
  int64_t tin = D;
  for (size_t i = 0; i < s.top.size(); ++i) {
    auto& y = top_[i];
    y.resize(static_cast<size_t>(B * s.top[i]));
    linear_forward(t, B, tin, s.top[i], P(topT_ + 2 * i), P(topT_ + 2 * i + 1), i + 1 < s.top.size(), s.precision, y.data());
    t = y.data();
    tin = s.top[i];
  }
}

void DenseModel::forward(const float* dense, const float* sparse, int64_t B, float* logits, StepTimes* times, bool bottomReady) {
  auto t0 = std::chrono::steady_clock::now();
  run_forward(dense, sparse, B, bottomReady);
  std::copy(top_.back().begin(), top_.back().end(), logits);
  if (times) times->forwardMs = ms_since(t0);
}

double DenseModel::forward_backward(const float* dense, const float* sparse, const float* labels, int64_t B,
                                    float gradScale, float* sparseGrad, float* logits, StepTimes* times, bool bottomReady) {
  const auto& s = spec_;
  auto t0 = std::chrono::steady_clock::now();
  run_forward(dense, sparse, B, bottomReady);
  if (logits) std::copy(top_.back().begin(), top_.back().end(), logits);
  if (times) times->forwardMs = ms_since(t0);
  auto t1 = std::chrono::steady_clock::now();

  // loss and dlogit
  g1_.resize(static_cast<size_t>(B));
  double loss = bce_with_logits(top_.back().data(), labels, B, g1_.data());
  if (gradScale != 1.0f)
    for (int64_t b = 0; b < B; ++b) g1_[b] *= gradScale;

  // top MLP, last layer first; g1_ holds the gradient w.r.t. the current layer's output
  const int64_t D = interaction_width();
  const float* topIn = s.interaction == Interaction::Cross ? cross_.xs.back().data() : inter_.data();
  for (size_t k = s.top.size(); k-- > 0;) {
    int64_t out = s.top[k], in = k == 0 ? D : s.top[k - 1];
    const float* x = k == 0 ? topIn : top_[k - 1].data();
    if (k + 1 < s.top.size()) relu_backward(top_[k].data(), g1_.data(), g1_.data(), B * out);
    g2_.resize(static_cast<size_t>(B * in));
    linear_backward(x, g1_.data(), B, in, out, P(topT_ + 2 * k), G(topT_ + 2 * k), G(topT_ + 2 * k + 1), g2_.data(), s.precision);
    std::swap(g1_, g2_);
  }
  // cross layers: g1_ is the gradient w.r.t. their output; replace it by the gradient w.r.t. their input
  if (s.interaction == Interaction::Cross) {
    std::vector<CrossLayerParams> layers;
    std::vector<CrossLayerGrads> grads;
    for (int64_t l = 0; l < s.crossLayers; ++l) {
      layers.push_back({P(crossT_ + 3 * l), P(crossT_ + 3 * l + 1), P(crossT_ + 3 * l + 2)});
      grads.push_back({G(crossT_ + 3 * l), G(crossT_ + 3 * l + 1), G(crossT_ + 3 * l + 2)});
    }
    g2_.resize(static_cast<size_t>(B * D));
    cross_backward(g1_.data(), B, D, s.crossRank, layers, s.precision, cross_, grads, g2_.data());
    std::swap(g1_, g2_);
  }
  // interaction → gradient of the bottom output (gx_) and of the pooled embeddings (sparseGrad)
  const int64_t d = s.bottom.back(), sw = sparse_width();
  gx_.resize(static_cast<size_t>(B * d));
  std::vector<float> scratch;
  float* se = sparseGrad;
  if (!se && sw > 0) {
    scratch.resize(static_cast<size_t>(B * sw));
    se = scratch.data();
  }
  if (s.interaction == Interaction::Dot) dot_interaction_backward(bot_.back().data(), sparse_, g1_.data(), B, d, s.numSparse, s.precision, gx_.data(), se);
  else concat_backward(g1_.data(), B, d, sw, gx_.data(), se);
  std::swap(g1_, gx_);
  // bottom MLP
  for (size_t k = s.bottom.size(); k-- > 0;) {
    int64_t out = s.bottom[k], in = k == 0 ? s.denseIn : s.bottom[k - 1];
    const float* x = k == 0 ? in_ : bot_[k - 1].data();
    relu_backward(bot_[k].data(), g1_.data(), g1_.data(), B * out);
    float* dx = nullptr;
    if (k > 0) {
      g2_.resize(static_cast<size_t>(B * in));
      dx = g2_.data();
    }
    linear_backward(x, g1_.data(), B, in, out, P(bottomT_ + 2 * k), G(bottomT_ + 2 * k), G(bottomT_ + 2 * k + 1), dx, s.precision);
    if (k > 0) std::swap(g1_, g2_);
  }
  if (times) times->backwardMs = ms_since(t1);
  return loss;
}

void DenseModel::apply(float lr, int64_t t) {
  bottomFor_ = nullptr;  // the parameters change: a kept bottom output is stale
  dense_optimizer_step(spec_.optimizer, lr, t, params_, grads_, state_, paramCount_);
}

}  // namespace embshard::dense
