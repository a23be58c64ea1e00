#include "kernels/abft.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "kernels/abft_bound.h"
#include "kernels/cpu_dispatch.h"
#include "kernels/dense_ops.h"

namespace ecps {

const char* AbftSchemeName(AbftScheme scheme) {
  switch (scheme) {
    case AbftScheme::kGlobal:
      return "global";
    case AbftScheme::kPanel:
      return "panel";
    case AbftScheme::kNone:
      break;
  }
  return "none";
}

const char* AbftModeName(AbftMode mode) {
  switch (mode) {
    case AbftMode::kDetect:
      return "detect";
    case AbftMode::kAuto:
      return "auto";
    case AbftMode::kOff:
      break;
  }
  return "off";
}

std::string MachineBalance::ToString() const {
  return absl::StrFormat(
      "GEMM %.1f GFLOP/s, memory %.1f GB/s, balance %.1f flop/byte, last-level cache %d KiB",
      gflops, gbytes_per_s, flops_per_byte(), cache_bytes >> 10);
}

namespace {

template <typename F>
double BestSeconds(int runs, F&& f) {
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                              .count());
  }
  return best;
}

// Eight independent sums, so the loads stream at the memory's pace rather than the adder's.
float StreamSum(const float* p, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) s[l] += p[i + l];
  }
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

}  // namespace

MachineBalance MeasureMachineBalance() {
  MachineBalance out;
  constexpr int kN = 512;
  std::vector<float> a(kN * kN, 0.5f), b(kN * kN, 0.25f), c(kN * kN);
  Sgemm(false, false, kN, kN, kN, a.data(), kN, b.data(), kN, 0.0f, c.data(), kN);  // warm-up
  const double gemm_s = BestSeconds(3, [&] {
    Sgemm(false, false, kN, kN, kN, a.data(), kN, b.data(), kN, 0.0f, c.data(), kN);
  });
  out.gflops = 2.0 * kN * kN * kN / gemm_s / 1e9;
  // 64 MiB: several times any L3 a worker's share of a machine has.
  constexpr int64_t kFloats = int64_t{16} << 20;
  std::vector<float> big(kFloats, 1.0f);
  volatile float sink = 0;
  const double read_s = BestSeconds(3, [&] { sink = sink + StreamSum(big.data(), kFloats); });
  out.gbytes_per_s = sizeof(float) * static_cast<double>(kFloats) / read_s / 1e9;
  long cache = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (cache <= 0) cache = sysconf(_SC_LEVEL2_CACHE_SIZE);
  out.cache_bytes = cache > 0 ? cache : 0;
  return out;
}

double ArithmeticIntensity(int m, int n, int k) {
  const double mm = m, nn = n, kk = k;
  return 2.0 * mm * nn * kk / (4.0 * (mm * kk + kk * nn + mm * nn));
}

AbftScheme SelectScheme(int m, int n, int k, const MachineBalance& balance) {
  const double bytes = 4.0 * (static_cast<double>(m) * k + static_cast<double>(k) * n +
                              static_cast<double>(m) * n);
  const bool memory_bound = ArithmeticIntensity(m, n, k) < balance.flops_per_byte();
  return memory_bound && bytes > static_cast<double>(balance.cache_bytes) ? AbftScheme::kPanel
                                                                          : AbftScheme::kGlobal;
}

int PanelRows(int m, int n, int k) {
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 <= 0) l2 = 1 << 20;
  const int64_t rows = (l2 / 2) / (static_cast<int64_t>(sizeof(float)) * (k + n));
  const int64_t p = std::max<int64_t>(16, rows / 16 * 16);
  return static_cast<int>(std::min<int64_t>(p, m));
}

// The formula is shared with the GPU's check bodies (kernels/abft_bound.h).
double ColumnBound(int p, int k, double a_frobenius, double b_column_norm) {
  return AbftColumnBound(kAbftLambda, p, k, a_frobenius, b_column_norm);
}

void FlipBit(float* value, int bit) {
  uint32_t u;
  std::memcpy(&u, value, sizeof(u));
  u ^= uint32_t{1} << (bit & 31);
  std::memcpy(value, &u, sizeof(u));
}

namespace {

// Each listed fault once, on its site's chosen run.
class ListedGemmFaults : public GemmFaultInjector {
 public:
  struct Fault {
    int site = 0;
    int64_t run = 0;
    int bit = 0;
  };
  explicit ListedGemmFaults(std::vector<Fault> faults) : faults_(std::move(faults)) {}

  bool Inject(int site, const GemmCall&, GemmFault* fault) override {
    absl::MutexLock lock(&mu_);
    const int64_t run = ++runs_[site];
    for (const Fault& f : faults_) {
      if (f.site != site || f.run != run) continue;
      *fault = {GemmFault::kOutput, 0, f.bit};
      return true;
    }
    return false;
  }

 private:
  const std::vector<Fault> faults_;
  absl::Mutex mu_;
  std::map<int, int64_t> runs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<GemmFaultInjector>> ParseGemmFaults(const std::string& list) {
  std::vector<ListedGemmFaults::Fault> faults;
  for (absl::string_view entry : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    ListedGemmFaults::Fault f;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &f.site) ||
        !absl::SimpleAtoi(parts[1], &f.run) || !absl::SimpleAtoi(parts[2], &f.bit) ||
        f.site < 0 || f.run < 1 || f.bit < 0 || f.bit > 31) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GEMM fault \"", entry, "\" is not SITE:RUN:BIT (site >= 0, run >= 1, bit 0-31)"));
    }
    faults.push_back(f);
  }
  if (faults.empty()) return absl::InvalidArgumentError("no GEMM fault listed");
  return std::make_unique<ListedGemmFaults>(std::move(faults));
}

namespace {

// Scratch of the checks on this thread (no meaning between calls; reused so that a check
// allocates nothing once warm).
struct CheckScratch {
  std::vector<double> av;       // k: sum over the panel's rows of op(A)
  std::vector<double> sq;       // k: sum over the panel's rows of op(A)^2
  std::vector<double> colsum;   // n: sum over the panel's rows of C
  std::vector<double> ref;      // n: (1^T A_P) op(B)
  std::vector<double> b_norm2;  // n: ||op(B)[:, j]||^2, once per GEMM
  std::vector<int> missed;      // the columns of the panel that missed
};
thread_local CheckScratch scratch;

// av = 1^T op(A)[r0:r1, :], sq likewise of the squares.
ECPS_CLONES void SumRowsOfA(const GemmCall& g, int r0, int r1, double* __restrict av,
                            double* __restrict sq) {
  const int k = g.k;
  if (!g.ta) {  // op(A)[r][i] = a[r * lda + i]
    std::fill(av, av + k, 0.0);
    std::fill(sq, sq + k, 0.0);
    for (int r = r0; r < r1; ++r) {
      const float* row = g.a + static_cast<int64_t>(r) * g.lda;
      for (int i = 0; i < k; ++i) {
        const double v = row[i];
        av[i] += v;
        sq[i] += v * v;
      }
    }
    return;
  }
  for (int i = 0; i < k; ++i) {  // op(A)[r][i] = a[i * lda + r]: a contiguous run per i
    const float* run = g.a + static_cast<int64_t>(i) * g.lda;
    double s[4] = {0, 0, 0, 0}, q[4] = {0, 0, 0, 0};
    int r = r0;
    for (; r + 4 <= r1; r += 4) {
      for (int l = 0; l < 4; ++l) {
        const double v = run[r + l];
        s[l] += v;
        q[l] += v * v;
      }
    }
    for (; r < r1; ++r) s[0] += run[r], q[0] += static_cast<double>(run[r]) * run[r];
    av[i] = (s[0] + s[1]) + (s[2] + s[3]);
    sq[i] = (q[0] + q[1]) + (q[2] + q[3]);
  }
}

// ref = av^T op(B); with norms, b_norm2[j] = ||op(B)[:, j]||^2 too.
ECPS_CLONES void ReferenceSums(const GemmCall& g, const double* __restrict av, bool norms,
                               double* __restrict ref, double* __restrict b_norm2) {
  const int n = g.n, k = g.k;
  if (!g.tb) {  // op(B)[i][j] = b[i * ldb + j]
    std::fill(ref, ref + n, 0.0);
    if (norms) std::fill(b_norm2, b_norm2 + n, 0.0);
    for (int i = 0; i < k; ++i) {
      const float* row = g.b + static_cast<int64_t>(i) * g.ldb;
      const double ai = av[i];
      for (int j = 0; j < n; ++j) ref[j] += ai * row[j];
      if (norms) {
        for (int j = 0; j < n; ++j) b_norm2[j] += static_cast<double>(row[j]) * row[j];
      }
    }
    return;
  }
  for (int j = 0; j < n; ++j) {  // op(B)[i][j] = b[j * ldb + i]: row j of b
    const float* row = g.b + static_cast<int64_t>(j) * g.ldb;
    double s[4] = {0, 0, 0, 0}, q[4] = {0, 0, 0, 0};
    int i = 0;
    for (; i + 4 <= k; i += 4) {
      for (int l = 0; l < 4; ++l) {
        s[l] += av[i + l] * row[i + l];
        if (norms) q[l] += static_cast<double>(row[i + l]) * row[i + l];
      }
    }
    for (; i < k; ++i) s[0] += av[i] * row[i], q[0] += static_cast<double>(row[i]) * row[i];
    ref[j] = (s[0] + s[1]) + (s[2] + s[3]);
    if (norms) b_norm2[j] = (q[0] + q[1]) + (q[2] + q[3]);
  }
}

ECPS_CLONES void SumRowsOfC(const GemmCall& g, int r0, int r1, double* __restrict colsum) {
  const int n = g.n;
  std::fill(colsum, colsum + n, 0.0);
  for (int r = r0; r < r1; ++r) {
    const float* row = g.c + static_cast<int64_t>(r) * g.ldc;
    for (int j = 0; j < n; ++j) colsum[j] += row[j];
  }
}

// Checks rows [r0, r1) of C; the B norms are computed when `norms` (the GEMM's first check). A
// miss is confirmed (ConfirmMiss) before it counts.
void CheckRows(const GemmCall& g, int r0, int r1, bool norms, int site,
               GemmFaultInjector* injector, AbftResult* result) {
  CheckScratch& s = scratch;
  s.av.resize(g.k);
  s.sq.resize(g.k);
  s.colsum.resize(g.n);
  s.ref.resize(g.n);
  s.b_norm2.resize(g.n);
  SumRowsOfA(g, r0, r1, s.av.data(), s.sq.data());
  ReferenceSums(g, s.av.data(), norms, s.ref.data(), s.b_norm2.data());
  SumRowsOfC(g, r0, r1, s.colsum.data());
  double a_norm2 = 0;
  for (int i = 0; i < g.k; ++i) a_norm2 += s.sq[i];
  const double a_frobenius = std::sqrt(a_norm2);
  s.missed.clear();
  for (int j = 0; j < g.n; ++j) {
    const double diff = std::fabs(s.colsum[j] - s.ref[j]);
    const double bound = ColumnBound(r1 - r0, g.k, a_frobenius, std::sqrt(s.b_norm2[j]));
    if (!(diff <= bound)) s.missed.push_back(j);  // NaN and infinity miss too
    if (std::isfinite(diff)) result->margin = std::max(result->margin, diff / bound);
  }
  if (s.missed.empty()) return;
  const int n = static_cast<int>(s.missed.size());
  if (ConfirmMiss(g, r0, r1, site, injector, s.missed, false, nullptr)) {
    result->misses += n;
  } else {
    result->cleared += n;
  }
}

// Whether every element of rows [r0, r1) x columns [j0, j1) of g.c is within the deterministic
// rounding bound of its dot product (ConfirmMiss). NaN and infinity are not.
bool WithinRounding(const GemmCall& g, int r0, int r1, int j0, int j1) {
  for (int r = r0; r < r1; ++r) {
    const float* a = g.ta ? g.a + r : g.a + static_cast<int64_t>(r) * g.lda;
    for (int j = j0; j < j1; ++j) {
      const float* b = g.tb ? g.b + static_cast<int64_t>(j) * g.ldb : g.b + j;
      if (!AbftElementWithinRounding(g.c[static_cast<int64_t>(r) * g.ldc + j], g.k, a,
                                     g.ta ? g.lda : 1, b, g.tb ? 1 : g.ldb)) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

InjectedGemm::InjectedGemm(const GemmCall& call, int site, GemmFaultInjector* injector)
    : call_(call), a_(call.a), b_(call.b) {
  inject_ = injector != nullptr && injector->Inject(site, call, &fault_);
  if (!inject_ || fault_.where == GemmFault::kOutput) return;
  const bool on_a = fault_.where == GemmFault::kInputA;
  const int64_t rows = on_a ? (call.ta ? call.k : call.m) : (call.tb ? call.n : call.k);
  const float* src = on_a ? call.a : call.b;
  corrupted_.assign(src, src + rows * (on_a ? call.lda : call.ldb));
  FlipBit(&corrupted_.at(fault_.element), fault_.bit);
  (on_a ? a_ : b_) = corrupted_.data();
}

void InjectedGemm::Run(int r0, int r1) {
  const GemmCall& g = call_;
  const float* a0 = g.ta ? a_ + r0 : a_ + static_cast<int64_t>(r0) * g.lda;
  Sgemm(g.ta, g.tb, r1 - r0, g.n, g.k, a0, g.lda, b_, g.ldb, 0.0f,
        g.c + static_cast<int64_t>(r0) * g.ldc, g.ldc);
  if (!inject_ || fault_.where != GemmFault::kOutput) return;
  const int64_t row = fault_.element / g.ldc;
  if (row >= r0 && row < r1) FlipBit(g.c + fault_.element, fault_.bit);
}

bool ConfirmMiss(const GemmCall& call, int r0, int r1, int site, GemmFaultInjector* injector,
                 const std::vector<int>& missed, bool by_rows, const GemmFinish& finish) {
  // Scratch in C's layout, so that an injected output fault lands on the same element. Only a
  // miss comes here.
  thread_local std::vector<float> again;
  again.resize(static_cast<size_t>(call.m) * call.ldc);  // rows [r0, r1) written and read
  GemmCall g = call;
  g.c = again.data();
  InjectedGemm(g, site, injector).Run(r0, r1);
  // The comparison first (on a finished copy, when there is a finish): a struck run needs no
  // more, and the element by element bound (k multiply-adds each) is for the same bits only.
  thread_local std::vector<float> finished;
  const float* compared = again.data();
  if (finish) {
    const int64_t begin = static_cast<int64_t>(r0) * g.ldc, end = static_cast<int64_t>(r1) * g.ldc;
    finished.resize(again.size());
    std::copy(again.begin() + begin, again.begin() + end, finished.begin() + begin);
    finish(finished.data() + begin, r0, r1);
    compared = finished.data();
  }
  for (int r = r0; r < r1; ++r) {
    const int64_t at = static_cast<int64_t>(r) * g.ldc;
    if (std::memcmp(call.c + at, compared + at, sizeof(float) * g.n) != 0) return true;
  }
  for (int line : missed) {
    if (!(by_rows ? WithinRounding(g, line, line + 1, 0, g.n)
                  : WithinRounding(g, r0, r1, line, line + 1))) {
      return true;
    }
  }
  return false;
}

AbftResult CheckedGemm(const GemmCall& call, AbftScheme scheme, int site,
                       GemmFaultInjector* injector) {
  AbftResult result;
  if (call.m <= 0 || call.n <= 0) return result;
  InjectedGemm gemm(call, site, injector);
  if (scheme != AbftScheme::kPanel) {
    gemm.Run(0, call.m);
    if (scheme == AbftScheme::kGlobal) CheckRows(call, 0, call.m, true, site, injector, &result);
    return result;
  }
  const int p = PanelRows(call.m, call.n, call.k);
  for (int r0 = 0; r0 < call.m; r0 += p) {
    const int r1 = std::min(call.m, r0 + p);
    gemm.Run(r0, r1);
    CheckRows(call, r0, r1, r0 == 0, site, injector, &result);
  }
  return result;
}

}  // namespace ecps
