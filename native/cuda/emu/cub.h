// cub.h — the CUB device-wide primitives the kernels use, for the emulator, with CUB's signatures and
// temp-storage protocol (a first call with d_temp_storage == nullptr only sets temp_storage_bytes; a
// call with less temp storage than that is cudaErrorInvalidValue). They run on the host when enqueued:
//   DeviceRadixSort::SortPairs — a stable LSD radix sort, 8-bit digits over the key bits [begin, end),
//     ping-ponging through the temp storage (as CUB's onesweep: equal keys keep their input order);
//   DeviceRunLengthEncode::Encode — unique keys, run lengths and the run count;
//   DeviceScan::ExclusiveSum / InclusiveSum — prefix sums in index order (in place allowed).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/emu/runtime.h"

namespace cub {

namespace emu_detail {
inline size_t round256(size_t b) { return (b + 255) & ~size_t(255); }
}  // namespace emu_detail

struct DeviceRadixSort {
  template <typename K, typename V, typename NumItemsT>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const K* d_keys_in, K* d_keys_out, const V* d_values_in,
                               V* d_values_out, NumItemsT num_items, int begin_bit = 0, int end_bit = sizeof(K) * 8,
                               cudaStream_t = nullptr) {
    static_assert(std::is_unsigned_v<K>, "the emulated radix sort handles unsigned keys");
    const size_t n = num_items > 0 ? static_cast<size_t>(num_items) : 0;
    const size_t need = emu_detail::round256(n * sizeof(K)) + emu_detail::round256(n * sizeof(V)) + 256;
    if (!d_temp_storage) {
      temp_storage_bytes = need;
      return cudaSuccess;
    }
    if (temp_storage_bytes < need || begin_bit < 0 || end_bit > static_cast<int>(sizeof(K) * 8) || begin_bit > end_bit)
      return embshard::emu::fail(cudaErrorInvalidValue);
    K* tk = static_cast<K*>(d_temp_storage);
    V* tv = reinterpret_cast<V*>(static_cast<uint8_t*>(d_temp_storage) + emu_detail::round256(n * sizeof(K)));
    std::memmove(d_keys_out, d_keys_in, n * sizeof(K));
    std::memmove(d_values_out, d_values_in, n * sizeof(V));
    // pass p scatters (keys, values) from (src) to (dst) by the digit at `shift`, stably
    K* sk = d_keys_out;
    V* sv = d_values_out;
    K* dk = tk;
    V* dv = tv;
    for (int shift = begin_bit; shift < end_bit; shift += 8) {
      const int bits = end_bit - shift < 8 ? end_bit - shift : 8;
      const K mask = static_cast<K>((K(1) << bits) - 1);
      size_t count[257] = {0};
      for (size_t i = 0; i < n; ++i) ++count[((sk[i] >> shift) & mask) + 1];
      for (int d = 0; d < 256; ++d) count[d + 1] += count[d];
      for (size_t i = 0; i < n; ++i) {
        const size_t at = count[(sk[i] >> shift) & mask]++;
        dk[at] = sk[i];
        dv[at] = sv[i];
      }
      std::swap(sk, dk);
      std::swap(sv, dv);
    }
    if (sk != d_keys_out) {
      std::memcpy(d_keys_out, sk, n * sizeof(K));
      std::memcpy(d_values_out, sv, n * sizeof(V));
    }
    return cudaSuccess;
  }
};

struct DeviceRunLengthEncode {
  template <typename InT, typename UniqueT, typename LenT, typename NumRunsT, typename NumItemsT>
  static cudaError_t Encode(void* d_temp_storage, size_t& temp_storage_bytes, InT d_in, UniqueT d_unique_out, LenT d_counts_out,
                            NumRunsT d_num_runs_out, NumItemsT num_items, cudaStream_t = nullptr) {
    if (!d_temp_storage) {
      temp_storage_bytes = 256;
      return cudaSuccess;
    }
    if (temp_storage_bytes < 256) return embshard::emu::fail(cudaErrorInvalidValue);
    const int64_t n = static_cast<int64_t>(num_items);
    int64_t runs = 0;
    for (int64_t i = 0; i < n;) {
      int64_t j = i + 1;
      while (j < n && d_in[j] == d_in[i]) ++j;
      d_unique_out[runs] = d_in[i];
      d_counts_out[runs] = static_cast<std::remove_reference_t<decltype(d_counts_out[0])>>(j - i);
      ++runs;
      i = j;
    }
    *d_num_runs_out = static_cast<std::remove_reference_t<decltype(*d_num_runs_out)>>(runs);
    return cudaSuccess;
  }
};

struct DeviceScan {
  template <typename InT, typename OutT, typename NumItemsT>
  static cudaError_t ExclusiveSum(void* d_temp_storage, size_t& temp_storage_bytes, InT d_in, OutT d_out, NumItemsT num_items,
                                  cudaStream_t = nullptr) {
    return scan(d_temp_storage, temp_storage_bytes, d_in, d_out, static_cast<int64_t>(num_items), false);
  }
  template <typename InT, typename OutT, typename NumItemsT>
  static cudaError_t InclusiveSum(void* d_temp_storage, size_t& temp_storage_bytes, InT d_in, OutT d_out, NumItemsT num_items,
                                  cudaStream_t = nullptr) {
    return scan(d_temp_storage, temp_storage_bytes, d_in, d_out, static_cast<int64_t>(num_items), true);
  }

 private:
  template <typename InT, typename OutT>
  static cudaError_t scan(void* d_temp_storage, size_t& temp_storage_bytes, InT in, OutT out, int64_t n, bool inclusive) {
    if (!d_temp_storage) {
      temp_storage_bytes = 256;
      return cudaSuccess;
    }
    if (temp_storage_bytes < 256) return embshard::emu::fail(cudaErrorInvalidValue);
    using T = std::remove_cv_t<std::remove_reference_t<decltype(out[0])>>;
    T acc = T(0);
    for (int64_t i = 0; i < n; ++i) {
      const T v = static_cast<T>(in[i]);
      if (inclusive) {
        acc = static_cast<T>(acc + v);
        out[i] = acc;
      } else {
        out[i] = acc;
        acc = static_cast<T>(acc + v);
      }
    }
    return cudaSuccess;
  }
};

}  // namespace cub
