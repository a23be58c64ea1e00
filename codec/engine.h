// Internal: the compute engine behind an ErasureCode backend. An engine only multiplies
// coefficient matrices with blocks; stripes, validation and decode planning live in codec.cc.
#ifndef ECPS_CODEC_ENGINE_H_
#define ECPS_CODEC_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ecps::codec::internal {

// A coefficient matrix expanded into an engine's own form (tables, bit matrices).
class PreparedMatrix {
 public:
  virtual ~PreparedMatrix() = default;
};

// Thread-safe: all methods are const and may run concurrently.
class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string_view name() const = 0;
  // Expands the rows x cols row-major matrix `coef`.
  virtual std::unique_ptr<PreparedMatrix> Prepare(const uint8_t* coef, int rows,
                                                  int cols) const = 0;
  // dst[q] = XOR_j M[q][j] * src[j] for all q < rows. Arguments are already validated.
  virtual absl::Status Apply(const PreparedMatrix& m, const uint8_t* const* src,
                             uint8_t* const* dst, size_t len) const = 0;
  // dst[i] ^= M[row0 + i][col] * src for i < rows.
  virtual absl::Status AccumulateColumn(const PreparedMatrix& m, int col, int row0, int rows,
                                        const uint8_t* src, uint8_t* const* dst,
                                        size_t len) const = 0;
};

// `name` is a concrete ecps-* kernel name; UNAVAILABLE if this CPU cannot run it.
absl::StatusOr<std::unique_ptr<Engine>> MakeEcpsEngine(std::string_view name);
// The best ecps-* kernel name for this CPU.
std::string_view BestEcpsKernel();
std::unique_ptr<Engine> MakeIsalEngine();
// UNAVAILABLE without CUDA support or a GPU.
absl::StatusOr<std::unique_ptr<Engine>> MakeCudaEngine();
bool CudaAvailable();

}  // namespace ecps::codec::internal

#endif  // ECPS_CODEC_ENGINE_H_
