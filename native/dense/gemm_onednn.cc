// gemm_onednn.cc — gemm() on oneDNN's matmul primitive (see gemm_onednn.h).
#include "dense/gemm_onednn.h"

#if defined(EMBSHARD_WITH_DNNL)
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/parallel.h"
#endif

namespace embshard::dense {

#if defined(EMBSHARD_WITH_DNNL)
namespace {

using dnnl::memory;
using Key = std::array<int64_t, 18>;

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One matmul primitive per distinct call shape; created on first use (creation costs far more than a run).
// Two dense models of one shape (the ranks of an in-process group, each on its own worker thread) run the
// same primitive at once, so its scratchpad is the caller's (user mode, one per calling thread): with the
// library's scratchpad, private to the primitive, concurrent runs would overwrite each other's partial sums.
struct Entry {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;  // empty when oneDNN has no kernel for the call here
};
struct Cache {
  std::mutex mu;
  std::map<Key, Entry> prims;
};
Cache& cache() {
  static Cache c;
  return c;
}

Key key_of(const GemmCall& g, int threads) {
  uint32_t alpha = 0, beta = 0;  // baked into the primitive's attributes: keyed by their bits
  std::memcpy(&alpha, &g.alpha, 4);
  std::memcpy(&beta, &g.beta, 4);
  return {g.transA, g.transB, g.M, g.N, g.K, g.lda, g.ldb, g.ldc, g.bias != nullptr, g.relu,
          static_cast<int64_t>(g.precision), g.batch, g.strideA, g.strideB, g.strideC,
          static_cast<int64_t>(alpha), static_cast<int64_t>(beta), threads};
}

// A [rows × cols] operand (or a batch of them) with row stride ld, as op() sees it: op(X)[r][c].
memory::desc operand(bool batched, int64_t batch, int64_t stride, int64_t rows, int64_t cols, int64_t ld, bool trans,
                     memory::data_type dt) {
  // op(X) = X: element (r, c) at r·ld + c; op(X) = Xᵀ: at c·ld + r.
  int64_t sr = trans ? 1 : ld, sc = trans ? ld : 1;
  if (!batched) return memory::desc({rows, cols}, dt, {sr, sc});
  return memory::desc({batch, rows, cols}, dt, {stride, sr, sc});
}

// An empty primitive when oneDNN has no implementation for the call on this CPU (e.g. bf16 below AVX-512).
Entry make_primitive(const GemmCall& g) {
  const bool batched = g.batch > 1;
  const auto in = g.precision == Precision::BF16 ? memory::data_type::bf16 : memory::data_type::f32;
  const auto f32 = memory::data_type::f32;
  auto a = operand(batched, g.batch, g.strideA, g.M, g.K, g.lda, g.transA, in);
  auto b = operand(batched, g.batch, g.strideB, g.K, g.N, g.ldb, g.transB, in);
  auto c = operand(batched, g.batch, g.strideC, g.M, g.N, g.ldc, false, f32);
  memory::desc bias;
  if (g.bias) bias = batched ? memory::desc({1, 1, g.N}, f32, {g.N, g.N, 1}) : memory::desc({1, g.N}, f32, {g.N, 1});
  dnnl::primitive_attr attr;
  dnnl::post_ops po;
  if (g.beta != 0.0f) po.append_sum(g.beta);
  if (g.relu) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
  dnnl::matmul::desc d = g.bias ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c);
  try {
    dnnl::matmul::primitive_desc pd(d, attr, cpu_engine());
    return {pd, dnnl::matmul(pd)};
  } catch (const dnnl::error&) {
    return {};
  }
}

// This thread's scratchpad for a primitive that needs `bytes` of it, page-aligned (grows, never shrinks).
void* thread_scratchpad(size_t bytes) {
  constexpr size_t kAlign = 4096;
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < bytes + kAlign) buf.resize(bytes + kAlign);
  auto p = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<void*>((p + kAlign - 1) & ~(uintptr_t{kAlign} - 1));
}

// Elements spanned by a (batch of) stored [rows × cols] operand(s) with row stride ld.
int64_t extent(int64_t batch, int64_t stride, int64_t rows, int64_t cols, int64_t ld) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

}  // namespace

bool onednn_built() { return true; }

bool onednn_gemm(const GemmCall& g) {
  // oneDNN's OpenMP team follows embshard's thread count (setThreads / --threads). The count is per calling
  // thread in OpenMP, and a primitive's blocking is chosen for the count it was created with: part of the key.
  const int threads = pool_threads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  Entry e;
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    Key k = key_of(g, threads);
    auto it = c.prims.find(k);
    if (it == c.prims.end()) it = c.prims.emplace(k, make_primitive(g)).first;
    e = it->second;
  }
  if (!e.prim) return false;
  const void* A = g.A;
  const void* B = g.B;
  thread_local std::vector<uint16_t> a16, b16;
  if (g.precision == Precision::BF16) {
    int64_t na = extent(g.batch, g.strideA, g.transA ? g.K : g.M, g.transA ? g.M : g.K, g.lda);
    int64_t nb = extent(g.batch, g.strideB, g.transB ? g.N : g.K, g.transB ? g.K : g.N, g.ldb);
    // grown only: resizing down and back up would zero-fill the regrown part on every call
    if (a16.size() < static_cast<size_t>(na)) a16.resize(static_cast<size_t>(na));
    if (b16.size() < static_cast<size_t>(nb)) b16.resize(static_cast<size_t>(nb));
    to_bf16(g.A, na, a16.data());
    to_bf16(g.B, nb, b16.data());
    A = a16.data();
    B = b16.data();
  }
  auto& eng = cpu_engine();
  thread_local dnnl::stream stream(eng);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(e.pd.src_desc(), eng, const_cast<void*>(A))},
                                       {DNNL_ARG_WEIGHTS, memory(e.pd.weights_desc(), eng, const_cast<void*>(B))},
                                       {DNNL_ARG_DST, memory(e.pd.dst_desc(), eng, g.C)}};
  if (g.bias) args.emplace(DNNL_ARG_BIAS, memory(e.pd.bias_desc(), eng, const_cast<float*>(g.bias)));
  const memory::desc scratch = e.pd.scratchpad_desc();
  if (scratch.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratch, eng, thread_scratchpad(scratch.get_size())));
  e.prim.execute(stream, args);
  stream.wait();
  return true;
}

std::string onednn_description() {
  const dnnl_version_t* v = dnnl_version();
  const char* isa = "unknown ISA";
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: isa = "avx512_core_amx (AMX bf16)"; break;
    case dnnl::cpu_isa::avx512_core_bf16: isa = "avx512_core_bf16"; break;
    case dnnl::cpu_isa::avx512_core_vnni: isa = "avx512_core_vnni (bf16 emulated)"; break;
    case dnnl::cpu_isa::avx512_core: isa = "avx512_core (bf16 emulated)"; break;
    case dnnl::cpu_isa::avx2: isa = "avx2 (no bf16 kernels)"; break;
    default: isa = "an ISA below AVX-512"; break;
  }
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + ", " + isa;
}

#else

bool onednn_built() { return false; }
bool onednn_gemm(const GemmCall&) { return false; }
std::string onednn_description() { return "oneDNN not built in"; }

#endif

}  // namespace embshard::dense
