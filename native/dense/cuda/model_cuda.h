// model_cuda.h — the whole dense model on one GPU: the same spec, tensor layout, initialisation and math
// as dense::DenseModel (model.h), with parameters, gradients and optimizer state kept in device memory
// between calls. Inputs (dense features, pooled embeddings, labels) come from host memory and the outputs
// (loss, logits, pooled-embedding gradients) go back to it, except where SparseMemory puts the pooled
// embeddings and their gradients in this device's memory (an embedding collection on the same GPU hands
// them over with no host copy); the flat buffers move between host and
// device only on read()/write() (checkpoints, the dense all-reduce). One call at a time per model (the
// addon enforces it); every call first makes the model's device current, so any host thread may call.
// Plain C++ header (no CUDA types): the addon's binding file includes it.
#pragma once
#include <cstdint>
#include <memory>

#include "dense/model.h"

namespace embshard::dense::cuda {

enum class Buffer { Params, Grads, State };

// Where forward / forward_backward read the pooled embeddings (`sparse`) and write their gradients
// (`sparseGrad`): host memory (the default) or this model's device memory.
struct SparseMemory {
  bool inputOnDevice = false;
  bool gradOnDevice = false;
};

class CudaDenseModel {
 public:
  // Validates the spec (as DenseModel), allocates on `device`, and uploads the deterministic
  // initialisation of spec.seed (the CPU model's exact values) or zeros when !initialize.
  CudaDenseModel(DenseModelSpec spec, int device, bool initialize);
  ~CudaDenseModel();
  CudaDenseModel(const CudaDenseModel&) = delete;
  CudaDenseModel& operator=(const CudaDenseModel&) = delete;

  // The layout (tensors, widths) shared with the CPU model; its buffers are not bound.
  const DenseModel& layout() const { return layout_; }
  int device() const { return device_; }
  int64_t size(Buffer b) const;

  // The device memory of a flat buffer (size(b) floats), for collectives that work on it in place (the
  // NCCL all-reduce of the gradients); valid as long as the model.
  float* device_data(Buffer b);
  // Owns the gradients' device memory (device_data(Grads)) with the model: it goes back to the device when
  // the model and every copy of this pointer are gone (a handle to the gradients keeps it valid past the model).
  std::shared_ptr<void> grads_owner() const;
  // Synchronous copies of a whole flat buffer (size(b) floats) device → host and host → device.
  void read(Buffer b, float* dst);
  void write(Buffer b, const float* src);

  // As DenseModel::forward_bottom / forward / forward_backward / apply; every pointer is host memory
  // except `sparse` and `sparseGrad` where `mem` says they are on this model's device. forward_backward
  // refuses (INVALID_ARGUMENT, before any work) device memory where `sparseGrad` overlaps `sparse`, or either
  // overlaps the model's own parameters, gradients or state; it allocates all its scratch before it writes the
  // first gradient, so an ALLOC_FAILED leaves the gradients as they were.
  void forward_bottom(const float* dense, int64_t B, StepTimes* t = nullptr);
  void forward(const float* dense, const float* sparse, int64_t B, float* logits, StepTimes* t = nullptr, bool bottomReady = false,
               SparseMemory mem = {});
  double forward_backward(const float* dense, const float* sparse, const float* labels, int64_t B, float gradScale,
                          float* sparseGrad, float* logits, StepTimes* t = nullptr, bool bottomReady = false, SparseMemory mem = {});
  void apply(float lr, int64_t t);

  struct Impl;  // device buffers, stream and cuBLAS handle (model_cuda.cu)

 private:
  DenseModel layout_;
  int device_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace embshard::dense::cuda
