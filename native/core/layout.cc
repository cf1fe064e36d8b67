// layout.cc — spec validation and the fused storage layout (see types.h).
#include <cmath>
#include <cstring>
#include <set>

#include "core/errors.h"
#include "core/types.h"

namespace embshard {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
  }
  return "?";
}

DType parse_dtype(const char* s, const char* what) {
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    if (!std::strcmp(s, dtype_name(t))) return t;
  fail("UNSUPPORTED_DTYPE", "%s '%s' is not fp32 | fp16 | bf16", what, s);
}

const char* optimizer_name(OptType t) {
  switch (t) {
    case OptType::SGD: return "sgd";
    case OptType::Adagrad: return "adagrad";
    case OptType::RowwiseAdagrad: return "rowwise_adagrad";
    case OptType::Adam: return "adam";
  }
  return "?";
}

std::string arena_description(const CollectionSpec& spec, const Layout& L, bool state) {
  size_t big = 0;
  uint64_t bigBytes = 0;
  for (size_t t = 0; t < spec.tables.size(); ++t) {
    uint64_t b = state ? spec.tables[t].rows * L.tables[t].statePerRow * 4 : spec.tables[t].rows * L.tables[t].rowBytes;
    if (b >= bigBytes) {
      big = t;
      bigBytes = b;
    }
  }
  return format("the %s of %zu table(s) (largest: table '%s', %llu bytes)", state ? "optimizer state" : "weights",
                spec.tables.size(), spec.tables[big].name.c_str(), static_cast<unsigned long long>(bigBytes));
}

namespace {

// INVALID_CONFIG unless every value the table's init can give is finite in fp32 (a NaN or an overflowing
// bound would fill the table with NaN / Inf before the first step).
void check_init(const TableSpec& t) {
  const InitSpec& i = t.init;
  bool ok;
  const char* fields;
  switch (i.kind) {
    case InitKind::Uniform:
      ok = std::isfinite(i.a) && std::isfinite(i.b) && std::isfinite(i.b - i.a);
      fields = "low and high (and high - low)";
      break;
    case InitKind::Normal:  // Box–Muller draws at most about 5.8 standard deviations from the mean
      ok = std::isfinite(i.a) && std::isfinite(i.b) && std::isfinite(std::fabs(i.a) + 6.0f * std::fabs(i.b));
      fields = "mean and std (and |mean| + 6·|std|)";
      break;
    default:
      ok = std::isfinite(i.a);
      fields = "value";
      break;
  }
  if (!ok) fail("INVALID_CONFIG", "table '%s': init %s must be finite numbers in fp32", t.name.c_str(), fields);
}

}  // namespace

Layout make_layout(const CollectionSpec& spec) {
  constexpr uint64_t kMaxRows = 1ull << 40;
  constexpr uint32_t kMaxDim = 65536;
  if (spec.tables.empty()) fail("INVALID_CONFIG", "a collection needs at least one table");
  Layout L;
  std::set<std::string> names;
  uint64_t rowBase = 0, wOff = 0, sOff = 0;
  for (const TableSpec& t : spec.tables) {
    if (t.name.empty()) fail("INVALID_CONFIG", "every table needs a name");
    if (!names.insert(t.name).second) fail("INVALID_CONFIG", "two tables are named '%s'", t.name.c_str());
    if (t.rows == 0 || t.rows > kMaxRows)
      fail("INVALID_SIZE", "table '%s': rows must be in [1, 2^40] (got %llu)", t.name.c_str(),
           static_cast<unsigned long long>(t.rows));
    if (t.dim == 0 || t.dim > kMaxDim)
      fail("INVALID_SIZE", "table '%s': dim must be in [1, %u] (got %u)", t.name.c_str(), kMaxDim, t.dim);
    check_init(t);
    TableStorage tl;
    tl.rowBytes = static_cast<uint64_t>(t.dim) * dtype_size(t.dtype);
    tl.weightOffset = wOff;
    tl.statePerRow = state_per_row(spec.optimizer.type, t.dim);
    tl.stateOffset = sOff;
    tl.rowBase = rowBase;
    // Round every table to 64 bytes so rows of different tables never share a cache line. Totals are
    // capped at 2^62 bytes (far beyond any machine) so no sum can wrap.
    constexpr uint64_t kMaxTotal = 1ull << 62;
    const uint64_t wBytes = (t.rows * tl.rowBytes + 63) & ~63ull;  // rows <= 2^40, rowBytes <= 2^18
    const uint64_t sFloats = (t.rows * tl.statePerRow + 15) & ~15ull;
    if (wBytes > kMaxTotal - wOff || sFloats > (kMaxTotal / 4) - sOff)
      fail("INVALID_SIZE", "the tables up to '%s' need more than 2^62 bytes of storage", t.name.c_str());
    wOff += wBytes;
    sOff += sFloats;
    rowBase += t.rows;
    L.tables.push_back(tl);
  }
  L.weightBytes = wOff;
  L.stateFloats = sOff;
  L.totalRows = rowBase;

  std::set<std::string> fnames;
  for (const FeatureSpec& f : spec.features) {
    if (f.name.empty()) fail("INVALID_CONFIG", "every feature needs a name");
    if (!fnames.insert(f.name).second)
      fail("DUPLICATE_FEATURE", "feature '%s' is mapped to more than one table", f.name.c_str());
    if (f.table >= spec.tables.size()) fail("INVALID_CONFIG", "feature '%s' names no table", f.name.c_str());
  }
  if (spec.features.empty()) fail("INVALID_CONFIG", "a collection needs at least one feature");
  int64_t col = 0;
  for (const FeatureSpec& f : spec.features) {
    if (f.pooling == Pooling::None) {
      L.pooledCol.push_back(-1);
    } else {
      L.pooledCol.push_back(col);
      col += spec.tables[f.table].dim;
    }
  }
  L.pooledDim = col;

  const OptimizerConfig& o = spec.optimizer;
  if (!(std::isfinite(o.lr) && o.lr >= 0)) fail("INVALID_CONFIG", "optimizer lr must be a finite number >= 0");
  if (!(std::isfinite(o.eps) && o.eps >= 0)) fail("INVALID_CONFIG", "optimizer eps must be a finite number >= 0");
  // adagrad, rowwise adagrad and adam divide by √s + eps: with eps 0 a zero (or underflowing) gradient
  // over zero state is 0 / 0, and the row turns NaN
  if (o.type != OptType::SGD && !(o.eps > 0))
    fail("INVALID_CONFIG", "optimizer eps must be > 0 in fp32 for %s (got %g)", optimizer_name(o.type), static_cast<double>(o.eps));
  if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1))
    fail("INVALID_CONFIG", "adam betas must be in [0, 1)");
  if (!std::isfinite(o.weightDecay)) fail("INVALID_CONFIG", "weightDecay must be finite");
  return L;
}

}  // namespace embshard
