// For the ABFT tests: injectors that flip one chosen bit of one chosen element of one GEMM
// site once, or of every GEMM on every run.
#ifndef ECPS_KERNELS_ABFT_TEST_UTIL_H_
#define ECPS_KERNELS_ABFT_TEST_UTIL_H_

#include "kernels/abft.h"

namespace ecps {

class OneFlip : public GemmFaultInjector {
 public:
  OneFlip(int site, GemmFault fault) : site_(site), fault_(fault) {}
  bool Inject(int site, const GemmCall&, GemmFault* fault) override {
    if (site != site_ || used_) return false;
    used_ = true;
    *fault = fault_;
    return true;
  }
  bool used() const { return used_; }

 private:
  int site_;
  GemmFault fault_;
  bool used_ = false;
};

// Flips `fault` on every run of every site: a fault that every computation repeats (a core that
// computes wrongly every time).
class EveryRunFlip : public GemmFaultInjector {
 public:
  explicit EveryRunFlip(GemmFault fault) : fault_(fault) {}
  bool Inject(int, const GemmCall&, GemmFault* fault) override {
    *fault = fault_;
    return true;
  }

 private:
  GemmFault fault_;
};

}  // namespace ecps

#endif  // ECPS_KERNELS_ABFT_TEST_UTIL_H_
