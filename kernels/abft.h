// Algorithm-based fault tolerance (ABFT) for the linear layers' GEMMs: a checked GEMM
// verifies C = op(A) op(B) by checksums, sum_r C[r][j] == sum_i (sum_r op(A)[r][i]) op(B)[i][j]
// for every column j, within a bound derived from the shapes and float rounding (docs/abft.md
// derives it). Two schemes:
//   kGlobal: the whole GEMM, then one check over all its rows: C, A and B read once more each.
//   kPanel:  the GEMM run as row panels sized for the L2 cache, each checked right after it is
//            produced, while its A and C panels are still in cache (B stays there if it fits).
// Which is cheaper depends on the GEMM's arithmetic intensity against the machine's balance
// (flops per byte of memory bandwidth): SelectScheme.
#ifndef ECPS_KERNELS_ABFT_H_
#define ECPS_KERNELS_ABFT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ecps {

enum class AbftScheme { kNone, kGlobal, kPanel };
const char* AbftSchemeName(AbftScheme scheme);

// worker.abft: off (no checks), detect (every GEMM checked with kGlobal), auto (each GEMM's
// scheme chosen by SelectScheme).
enum class AbftMode { kOff, kDetect, kAuto };
const char* AbftModeName(AbftMode mode);

// C (m x n) = op(A) (m x k) op(B) (k x n), row-major; op transposes when ta / tb. beta is 0.
struct GemmCall {
  bool ta = false, tb = false;
  int m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int lda = 0;
  const float* b = nullptr;
  int ldb = 0;
  float* c = nullptr;
  int ldc = 0;
};

// The machine's balance: the peak rate of a large single-threaded GEMM and the bandwidth of a
// streaming read far larger than the caches.
struct MachineBalance {
  double gflops = 0;         // GEMM, one thread
  double gbytes_per_s = 0;   // read bandwidth, one thread
  int64_t cache_bytes = 0;   // the last-level cache (0: unknown, taken as holding nothing)
  double flops_per_byte() const { return gbytes_per_s > 0 ? gflops / gbytes_per_s : 0; }
  std::string ToString() const;
};

// Measures it (about 0.2 s, one thread, the GEMM library in use). Callers measure once and keep
// the result (the worker at start-up, logged and reported).
MachineBalance MeasureMachineBalance();

// flops / bytes of C = op(A) op(B) with each operand moved once: 2mnk / 4(mk + kn + mn).
double ArithmeticIntensity(int m, int n, int k);

// kPanel for a memory-bound GEMM (intensity below the balance) whose operands do not fit the
// last-level cache: its check must reuse what the GEMM just brought into cache, or pay a second
// trip to memory. kGlobal otherwise: for a compute-bound GEMM the check's extra passes hide
// behind the arithmetic, and when A, B and C fit the cache they are re-read from it anyway, so
// the panels' extra GEMM calls would buy nothing (bench/abft_bench measured both; docs/abft.md).
AbftScheme SelectScheme(int m, int n, int k, const MachineBalance& balance);

// Rows per panel of kPanel: as many as keep an A panel and a C panel within half the L2 cache,
// a multiple of 16, at least 16 (at most m).
int PanelRows(int m, int n, int k);

// The check's tolerance for one column of a panel of p rows (docs/abft.md):
//   bound = (lambda u sqrt(2k + 12) (1 + 2ku) + (2p + k + 2) u_d sqrt(p)) ||A_P||_F ||B_:j||_2 + eta
// u = 2^-24 (float), u_d = 2^-53, lambda = kAbftLambda, eta covers denormals flushed to zero.
constexpr double kAbftLambda = 12.0;
double ColumnBound(int p, int k, double a_frobenius, double b_column_norm);

// The fault-injection seam: a test's injector flips bits in a GEMM's output or in what the GEMM
// reads of its inputs (a copy; the checksums read the originals, as when a fault strikes the
// GEMM's loads). Not on the production path: a null injector costs one branch per GEMM.
struct GemmFault {
  enum Where { kOutput, kInputA, kInputB } where = kOutput;
  int64_t element = 0;  // index into C (m x ldc), or into A's / B's storage
  int bit = 0;          // 0..31
};
class GemmFaultInjector {
 public:
  virtual ~GemmFaultInjector() = default;
  // Called before GEMM `site` runs; true and *fault to corrupt this run. Must be thread-safe
  // when the model runs slices on several threads.
  virtual bool Inject(int site, const GemmCall& call, GemmFault* fault) = 0;
};

// Flips `bit` of *value.
void FlipBit(float* value, int bit);

// The faults a test asks of a running worker (ECPS_GEMM_FAULTS; the worker honours it only when
// started with ECPS_FAULT_INJECTION=1, docs/abft.md): "SITE:RUN:BIT[,SITE:RUN:BIT...]", each
// flipping bit BIT (0-31) of output element 0 of GEMM site SITE (layer l's forward 3l, weight
// gradient 3l + 1, input gradient 3l + 2) on the site's RUN-th run in this process (1-based,
// counted over every slice; a step computed again runs its sites again). Thread-safe.
// INVALID_ARGUMENT naming the entry that is not of that form.
absl::StatusOr<std::unique_ptr<GemmFaultInjector>> ParseGemmFaults(const std::string& list);

// One GEMM as the injector (may be null) asks for site `site`: it reads a corrupted copy of an
// input, or its output gets a bit flipped right after the rows holding the element are written.
// What the checks read is the caller's (the originals).
class InjectedGemm {
 public:
  InjectedGemm(const GemmCall& call, int site, GemmFaultInjector* injector);
  // Computes rows [r0, r1) of C (oneDNN or OpenBLAS, beta 0).
  void Run(int r0, int r1);

 private:
  GemmCall call_;
  const float* a_;
  const float* b_;
  bool inject_ = false;
  GemmFault fault_;
  std::vector<float> corrupted_;
};

// The GEMM (oneDNN or OpenBLAS, kernels/dense_ops.h) checked with `scheme` (kNone: unchecked).
// `site` names the GEMM for the injector (which may be null).
struct AbftResult {
  int misses = 0;       // columns (over all panels) whose checksum missed the bound, the miss
                        // confirmed (ConfirmMiss); 0: a pass
  int cleared = 0;      // columns that missed the bound and were cleared by ConfirmMiss
  double margin = 0.0;  // the largest |checksum difference| / bound seen: how near a clean GEMM
                        // comes to a false alarm (0 when unchecked)
};
AbftResult CheckedGemm(const GemmCall& call, AbftScheme scheme, int site = 0,
                       GemmFaultInjector* injector = nullptr);

// Stage two of a check (docs/abft.md, "Confirming a miss"). The bound is probabilistic: a sum
// that misses it is a fault, or rounding errors that did not behave as independent ones (rows
// that repeat round alike). Rows [r0, r1) of the GEMM are computed again, through the injector
// as any run, into scratch, and `finish` (what the caller has since done to C in place: its
// bias and ReLU, a mask; may be empty) is applied to those rows. The miss stands when
//  - they differ from C's bit for bit: the run that wrote C was struck; or
//  - they are the same, and an element of the missed lines lies outside the deterministic
//    rounding bound, |c - sum_i a b| <= (gamma_k + gamma_k^d) sum_i |a b| + flushed denormals
//    (a fault that every run repeats).
// Otherwise the result is one a float GEMM may give, and the alarm is withdrawn (false).
// `missed` lists the columns of C that missed, or its rows when `by_rows` (dw's check).
using GemmFinish = std::function<void(float* rows, int r0, int r1)>;
bool ConfirmMiss(const GemmCall& call, int r0, int r1, int site, GemmFaultInjector* injector,
                 const std::vector<int>& missed, bool by_rows, const GemmFinish& finish);

struct LayerChecksums;  // kernels/abft_layer.h

// What a linear layer's three GEMMs are checked with, and where misses are counted.
struct LinearAbft {
  AbftScheme forward = AbftScheme::kNone;      // y = x w^T
  AbftScheme weight_grad = AbftScheme::kNone;  // dw = dy^T x
  AbftScheme input_grad = AbftScheme::kNone;   // dx = dy w
  int site = 0;  // sites site, site + 1, site + 2 for the three products
  GemmFaultInjector* injector = nullptr;
  int* misses = nullptr;  // incremented by the misses; must be set when a scheme is
  int* cleared = nullptr;  // incremented by the misses ConfirmMiss cleared; may be null
  // Where the layer keeps the checksums its forward computes for its backward
  // (kernels/abft_layer.h); null: every GEMM is checked on its own (CheckedGemm).
  LayerChecksums* sums = nullptr;
  // The next layer's, when its input is this layer's output and it is checked with them: the
  // forward's epilogue then takes that input's sums from the rows it writes.
  LayerChecksums* output_sums = nullptr;
};

}  // namespace ecps

#endif  // ECPS_KERNELS_ABFT_H_
