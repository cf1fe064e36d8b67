// types.h — the vocabulary of a collection: tables, features, dtypes, pooling, optimizer settings,
// and the fused layout that places every table and its optimizer state in one storage arena.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace embshard {

enum class DType : uint8_t { F32 = 0, F16 = 1, BF16 = 2 };
enum class Pooling : uint8_t { Sum = 0, Mean = 1, None = 2 };
enum class OptType : uint8_t { SGD = 0, Adagrad = 1, RowwiseAdagrad = 2, Adam = 3 };
enum class IdType : uint8_t { I64 = 0, I32 = 1, U32 = 2 };
enum class IdPolicy : uint8_t { Error = 0, Modulo = 1 };
enum class NonFinite : uint8_t { Error = 0, Skip = 1 };
enum class InitKind : uint8_t { Uniform = 0, Normal = 1, Constant = 2 };

inline size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }
const char* dtype_name(DType t);
// "fp32" | "fp16" | "bf16" to its DType; UNSUPPORTED_DTYPE naming `what` otherwise.
DType parse_dtype(const char* s, const char* what);
const char* optimizer_name(OptType t);

struct InitSpec {
  InitKind kind = InitKind::Uniform;
  float a = 0;  // uniform: low; normal: mean; constant: value
  float b = 0;  // uniform: high; normal: std
};

struct TableSpec {
  std::string name;
  uint64_t rows = 0;
  uint32_t dim = 0;
  DType dtype = DType::F32;
  IdPolicy idPolicy = IdPolicy::Error;
  InitSpec init;
};

struct FeatureSpec {
  std::string name;
  uint32_t table = 0;
  Pooling pooling = Pooling::Sum;
};

struct OptimizerConfig {
  OptType type = OptType::SGD;
  float lr = 0.01f;
  float eps = 1e-8f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float weightDecay = 0.0f;
  bool stochasticRounding = false;
  NonFinite nonFinite = NonFinite::Error;
};

struct CollectionSpec {
  std::vector<TableSpec> tables;
  std::vector<FeatureSpec> features;  // declared order: output order of pooled features
  OptimizerConfig optimizer;
  uint64_t seed = 0;
};

// Number of fp32 optimizer-state values per row for a table of width `dim`.
inline uint64_t state_per_row(OptType t, uint32_t dim) {
  switch (t) {
    case OptType::SGD: return 0;
    case OptType::Adagrad: return dim;
    case OptType::RowwiseAdagrad: return 1;
    case OptType::Adam: return 2ull * dim;
  }
  return 0;
}

// Where each table lives in the fused arenas, and where each feature lands in the pooled output.
struct TableStorage {
  uint64_t weightOffset = 0;  // bytes into the weight arena
  uint64_t rowBytes = 0;      // dim * dtype size
  uint64_t stateOffset = 0;   // floats into the state arena
  uint64_t statePerRow = 0;   // floats per row
  uint64_t rowBase = 0;       // first global row index (linearized id space over all tables)
};

struct Layout {
  std::vector<TableStorage> tables;
  std::vector<int64_t> pooledCol;  // per feature: column offset in the pooled output, -1 for sequence features
  int64_t pooledDim = 0;
  uint64_t weightBytes = 0;
  uint64_t stateFloats = 0;
  uint64_t totalRows = 0;
};

// Validates the spec (names, sizes, feature→table mapping, optimizer) and computes the layout.
// Throws Error with codes INVALID_CONFIG / INVALID_SIZE / DUPLICATE_FEATURE / UNSUPPORTED_OPTIMIZER.
Layout make_layout(const CollectionSpec& spec);

// Names an arena for an allocation-failure message: what it holds and its largest table with its bytes.
std::string arena_description(const CollectionSpec& spec, const Layout& layout, bool state);

// Bits needed for a key in [0, n): the radix-sort width of linearised row keys on both backends.
inline int key_bits(uint64_t n) {
  int b = 0;
  while (b < 64 && (uint64_t(1) << b) < n) ++b;
  return b;
}

}  // namespace embshard
