// The Criteo line parser (TSV and CSV forms) on arbitrary bytes: a sample within the tables'
// ranges, or a reason that names what is wrong.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "worker/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<int64_t> rows(26, 1000);
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  for (bool csv : {false, true}) {
    float dense[13];
    int64_t sparse[26];
    float label = -1;
    std::string reason;
    if (ecps::ParseCriteoLine(line, csv, rows, dense, sparse, &label, &reason)) {
      if (label != 0 && label != 1) std::abort();
      for (int64_t id : sparse) {
        if (id < 0 || id >= 1000) std::abort();
      }
    } else if (reason.empty()) {
      std::abort();  // a refusal always says why
    }
  }
  return 0;
}
