// ecps::codec: a systematic (k, r) erasure code over GF(2^8).
//
// A stripe has k data blocks and r parity blocks of equal length; members are numbered
// 0..k-1 (data) and k..k+r-1 (parity). Parity block q is
//   parity[q] = XOR_j coefficient(q, j) * data[j]          (GF(2^8) products, byte-wise)
// with a Cauchy coefficient matrix, so any k of the k + r members rebuild all the others
// (MDS). For r >= 2 the matrix is rows k..k+r-1 of ISA-L's gf_gen_cauchy1_matrix, byte for
// byte (c[q][j] = 1 / ((k + q) XOR j) in the field of polynomial 0x11D); for r == 1 it is a
// single all-ones row, i.e. plain XOR parity. Parity is therefore bit-identical to ISA-L's
// ec_encode_data with the same matrix, whatever the backend.
//
// Thread safety: an ErasureCode is immutable after Create except for its internal decode
// cache, which is locked; every method may be called concurrently from any number of
// threads. Callers own all buffers; no method keeps a pointer after it returns. Output
// buffers must not overlap inputs or each other. A non-OK status leaves outputs untouched
// for argument errors (checked before any byte is written); only the "cuda" backend can fail
// after writing has begun (UNAVAILABLE/INTERNAL from the device).
#ifndef ECPS_CODEC_CODEC_H_
#define ECPS_CODEC_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ecps::codec {

class ErasureCode {
 public:
  // Builds a code for k data and r parity blocks: 1 <= k, 1 <= r, k + r <= 255, else
  // INVALID_ARGUMENT. `backend` picks the implementation:
  //   "auto"             the fastest for this CPU (see docs/codec.md; never "cuda")
  //   "ecps"             the best of the ecps-* kernels this CPU supports
  //   "ecps-avx512-gfni" "ecps-avx2-gfni" "ecps-avx2" "ecps-portable"   own GEMM kernels
  //   "isal"             Intel ISA-L (ec_encode_data)
  //   "cuda"             CUDA kernels on GPU 0, staging host buffers through device memory
  // Unknown names give INVALID_ARGUMENT; a backend this machine cannot run (missing CPU
  // feature, no GPU, built without CUDA) gives UNAVAILABLE.
  static absl::StatusOr<std::unique_ptr<ErasureCode>> Create(int k, int r,
                                                             std::string_view backend = "auto");

  // Concrete backend names Create accepts on this machine ("auto" and "ecps" excluded).
  static std::vector<std::string> AvailableBackends();

  // The concrete backend "auto" resolves to on this machine.
  static std::string AutoBackend();

  virtual ~ErasureCode();
  ErasureCode(const ErasureCode&) = delete;
  ErasureCode& operator=(const ErasureCode&) = delete;

  int k() const { return k_; }
  int r() const { return r_; }
  // The concrete backend name, e.g. "ecps-avx512-gfni" (never "auto" or "ecps").
  virtual std::string_view backend() const = 0;
  // Parity row q (0 <= q < r), data column j (0 <= j < k); out-of-range indices return 0.
  uint8_t coefficient(int q, int j) const;

  // parity[q][0..len) = XOR_j coefficient(q, j) * data[j][0..len), for q < r.
  // Needs exactly k data and r parity pointers, none null. Any len (0 is a no-op) and any
  // alignment.
  virtual absl::Status Encode(absl::Span<const uint8_t* const> data,
                              absl::Span<uint8_t* const> parity, size_t len) const = 0;

  // Folds a change of data block j into parity block q alone (the holder of one parity block
  // calls this): parity[0..len) ^= coefficient(q, j) * delta[0..len), where
  // delta = new_data XOR old_data. INVALID_ARGUMENT for q, j out of range or null pointers.
  virtual absl::Status UpdateParity(int q, int j, const uint8_t* delta, uint8_t* parity,
                                    size_t len) const = 0;

  // The same for all r parity blocks at once (one pass over delta); needs r non-null parity
  // pointers.
  virtual absl::Status Update(int j, const uint8_t* delta, absl::Span<uint8_t* const> parity,
                              size_t len) const = 0;

  // Rebuilds members from survivors. available_ids[i] names the member in available[i];
  // wanted_ids[i] names the member to write to out[i] (data or parity, possibly one that is
  // also available). Needs at least k distinct, in-range available ids (when more are given,
  // the k lowest ids are used), distinct in-range wanted ids, matching span sizes and no null
  // pointers; otherwise INVALID_ARGUMENT. Decode matrices are cached per
  // (survivors, wanted) pattern.
  virtual absl::Status Decode(absl::Span<const int> available_ids,
                              absl::Span<const uint8_t* const> available,
                              absl::Span<const int> wanted_ids, absl::Span<uint8_t* const> out,
                              size_t len) const = 0;

 protected:
  ErasureCode(int k, int r, std::vector<uint8_t> coefficients);
  // Row-major r x k.
  const std::vector<uint8_t>& coefficients() const { return coefficients_; }

 private:
  int k_;
  int r_;
  std::vector<uint8_t> coefficients_;
};

}  // namespace ecps::codec

#endif  // ECPS_CODEC_CODEC_H_
