#include "export/dlrm_shape.h"

#include "absl/strings/str_cat.h"

namespace ecps {

std::vector<DlrmLayer> DlrmLayers(const DlrmShape& shape) {
  std::vector<DlrmLayer> layers;
  int in = shape.num_dense;
  auto add = [&](int out, bool relu) {
    layers.push_back({in, out, relu, static_cast<int>(2 * layers.size())});
    in = out;
  };
  for (int w : shape.bottom_mlp) add(w, true);
  in = shape.top_in();
  for (int w : shape.top_mlp) add(w, true);
  add(1, false);
  return layers;
}

namespace {

absl::Status NotDlrm(const std::string& why) {
  return absl::FailedPreconditionError(
      absl::StrCat("the checkpoint's dense tensors are not a DLRM's: ", why));
}

// (in, out) of every layer from its weight and bias sizes.
absl::StatusOr<std::vector<std::pair<int, int>>> LayerSizes(const std::vector<int64_t>& sizes) {
  if (sizes.size() < 4 || sizes.size() % 2 != 0) {
    return NotDlrm(
        absl::StrCat(sizes.size(), " tensors; a weight and a bias per layer, 2 layers at least"));
  }
  std::vector<std::pair<int, int>> layers;
  for (size_t i = 0; i < sizes.size(); i += 2) {
    const int64_t w = sizes[i], b = sizes[i + 1];
    if (b < 1 || b > (1 << 30) || w % b != 0 || w / b > (1 << 30)) {
      return NotDlrm(absl::StrCat("tensor ", i, " (size ", w, ") is not a weight over tensor ",
                                  i + 1, " (a bias of size ", b, ")"));
    }
    layers.emplace_back(static_cast<int>(w / b), static_cast<int>(b));
  }
  return layers;
}

}  // namespace

absl::StatusOr<DlrmShape> ShapeFromLayout(const CheckpointLayout& layout) {
  absl::StatusOr<std::vector<std::pair<int, int>>> layers = LayerSizes(layout.dense_sizes);
  if (!layers.ok()) return layers.status();
  DlrmShape shape;
  shape.dim = layout.dim;
  shape.table_rows = layout.table_rows;
  shape.num_dense = (*layers)[0].first;
  size_t l = 0;
  shape.bottom_mlp.push_back((*layers)[0].second);
  while (++l < layers->size() && (*layers)[l].first == (*layers)[l - 1].second) {
    shape.bottom_mlp.push_back((*layers)[l].second);
  }
  if (shape.bottom_mlp.back() != shape.dim) {
    return NotDlrm(absl::StrCat("the bottom MLP ends with width ", shape.bottom_mlp.back(),
                                ", not the embedding dimension ", shape.dim));
  }
  if (l == layers->size() || (*layers)[l].first != shape.top_in()) {
    return NotDlrm(absl::StrCat("no top MLP taking ", shape.top_in(), " inputs (dim ", shape.dim,
                                " + ", shape.pairs(), " dot products of ", shape.num_sparse(),
                                " tables) after the bottom MLP"));
  }
  for (; l < layers->size(); ++l) {
    if (l + 1 < layers->size() && (*layers)[l + 1].first != (*layers)[l].second) {
      return NotDlrm(absl::StrCat("top layer inputs ", (*layers)[l + 1].first,
                                  " do not follow the width ", (*layers)[l].second));
    }
    if (l + 1 < layers->size()) shape.top_mlp.push_back((*layers)[l].second);
  }
  if (layers->back().second != 1) {
    return NotDlrm(absl::StrCat("the output layer is ", layers->back().second, " wide, not 1"));
  }
  return shape;
}

}  // namespace ecps
