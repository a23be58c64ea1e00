#include "worker/pipeline_replay.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace ecps {

int64_t SharedRows::count() const {
  int64_t n = 0;
  for (const auto& p : positions) n += static_cast<int64_t>(p.size());
  return n;
}

void FindSharedRows(const UniqueIds& previous, const UniqueIds& next, SharedRows* out) {
  const size_t tables = next.rows.size();
  out->positions.resize(tables);
  out->previous.resize(tables);
  for (size_t t = 0; t < tables; ++t) {
    std::vector<int32_t>& here = out->positions[t];
    std::vector<int32_t>& there = out->previous[t];
    here.clear();
    there.clear();
    if (t >= previous.rows.size()) continue;
    // Both sorted and unique: one merge.
    const std::vector<int64_t>& a = previous.rows[t];
    const std::vector<int64_t>& b = next.rows[t];
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
      if (a[i] < b[j]) {
        ++i;
      } else if (b[j] < a[i]) {
        ++j;
      } else {
        there.push_back(static_cast<int32_t>(i++));
        here.push_back(static_cast<int32_t>(j++));
      }
    }
  }
}

absl::Status ReplaySparse(const SparseOptimizerConfig& opt, int dim,
                          const std::vector<std::vector<float>>& previous_grads, SharedRows* shared,
                          std::vector<std::vector<float>>* rows) {
  const int pf = dim + SparseStateFloats(opt, dim);
  if (shared->count() == 0) return absl::OkStatus();
  if (shared->payload_floats != pf) {
    return absl::InternalError(
        absl::StrCat("the servers sent row payloads of ", shared->payload_floats,
                     " floats, the job's sparse "
                     "optimizer has ",
                     pf, " (embedding_dim ", dim, " and its state): they run another one"));
  }
  for (size_t t = 0; t < shared->positions.size(); ++t) {
    const std::vector<int32_t>& here = shared->positions[t];
    const std::vector<int32_t>& there = shared->previous[t];
    if (shared->payloads.size() <= t || shared->payloads[t].size() != here.size() * pf) {
      return absl::InternalError(absl::StrCat("table ", t, ": no payload pulled for some of the ",
                                              here.size(), " rows the previous step shares"));
    }
    float* payloads = shared->payloads[t].data();
    for (size_t i = 0; i < here.size(); ++i) {
      float* payload = payloads + i * pf;
      ApplySparseUpdate(opt, dim, previous_grads[t].data() + static_cast<size_t>(there[i]) * dim,
                        payload);
      std::memcpy((*rows)[t].data() + static_cast<size_t>(here[i]) * dim, payload,
                  sizeof(float) * dim);
    }
  }
  return absl::OkStatus();
}

absl::Status ReplayDense(const DenseOptimizerConfig& opt,
                         const std::vector<std::vector<float>>& grads, PulledDense* dense) {
  if (grads.size() != dense->tensors.size() || dense->states.size() != grads.size() ||
      dense->versions.size() != grads.size()) {
    return absl::InternalError(absl::StrCat("dense replay of ", grads.size(), " gradients on ",
                                            dense->tensors.size(), " tensors"));
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const int64_t size = static_cast<int64_t>(dense->tensors[i].size());
    if (static_cast<int64_t>(grads[i].size()) != size ||
        static_cast<int64_t>(dense->states[i].size()) != DenseStateFloats(opt, size)) {
      return absl::InternalError(absl::StrCat("dense tensor ", i, ": ", size, " weights, ",
                                              dense->states[i].size(),
                                              " state floats and a gradient of ", grads[i].size(),
                                              " do not fit the job's dense "
                                              "optimizer"));
    }
    // The primary counts the update first and applies it at the new count (DenseStore).
    ++dense->versions[i];
    ApplyDenseUpdate(opt, dense->versions[i], size, grads[i].data(), dense->tensors[i].data(),
                     dense->states[i].data());
  }
  return absl::OkStatus();
}

}  // namespace ecps
