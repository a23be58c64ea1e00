// The GPU kernels' bodies run on the CPU (body_dense_math.h): the pair walk, the row-use
// lists, the step's gradients against finite differences of its own loss, slices against the
// whole batch, and bad input. Runs on every machine (worker/dense_math_test.cc compares the
// bodies with the CPU worker's kernels; cuda_dense_math_test.cc the GPU with the bodies).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/step_plan.h"
#include "kernels/cuda/test_batch.h"
#include "kernels/cuda/train_kernels.h"

namespace ecps::gpu {
namespace {

using testing::Bodies;
using testing::MakeTestStep;
using testing::MaxRelativeError;
using testing::SmallModel;
using testing::TestOutput;
using testing::TestStep;
using testing::WideModel;

TEST(TrainKernels, PairOfWalksTheLowerTriangleInOrder) {
  for (int vectors = 2; vectors <= 60; ++vectors) {
    int p = 0;
    for (int r = 1; r < vectors; ++r) {
      for (int c = 0; c < r; ++c, ++p) {
        int rr = -1, cc = -1;
        PairOf(p, &rr, &cc);
        ASSERT_EQ(rr, r) << "pair " << p;
        ASSERT_EQ(cc, c) << "pair " << p;
      }
    }
  }
}

// cuBLASLt's algorithms assume 256-byte aligned operands: every tensor of the flat buffer
// starts on one, and the sizes are the model's.
TEST(TrainKernels, PlanAlignsEveryTensor) {
  ModelPlan plan;
  ASSERT_EQ(MakeModelPlan(WideModel(), &plan), "");
  EXPECT_EQ(plan.tensor_size, DenseTensorSizes(WideModel()));
  for (size_t t = 0; t < plan.tensor_offset.size(); ++t) {
    EXPECT_EQ(plan.tensor_offset[t] % kTensorAlign, 0) << "tensor " << t;
    if (t > 0) {
      EXPECT_GE(plan.tensor_offset[t], plan.tensor_offset[t - 1] + plan.tensor_size[t - 1]);
    }
  }
  EXPECT_EQ(plan.params % kTensorAlign, 0);
  EXPECT_GE(plan.params, plan.tensor_offset.back() + plan.tensor_size.back());
}

TEST(TrainKernels, RowUseListsEachRowsSamplesInOrder) {
  const TestStep s = MakeTestStep(SmallModel(), 20, 6, 3);
  const StepInput in = s.Input();
  RowUse use;
  ASSERT_EQ(MakeRowUse(in, 3, 4, 17, &use), "");
  ASSERT_EQ(use.row_offset.back(), 18);
  ASSERT_EQ(use.occ_samples.size(), 13u * 3);
  for (int64_t u = 0; u < 18; ++u) {
    const int t = use.row_table[u];
    const int64_t row = u - use.row_offset[t];
    std::vector<int32_t> want;
    for (int b = 4; b < 17; ++b) {
      if (in.index[b * 3 + t] == row) want.push_back(b - 4);
    }
    std::vector<int32_t> got(use.occ_samples.begin() + use.occ_offset[u],
                             use.occ_samples.begin() + use.occ_offset[u + 1]);
    EXPECT_EQ(got, want) << "row " << u;
  }
}

// The bodies' gradients are the gradients of their loss: central differences of the mean
// loss in double agree with them (rows, and a sample of every dense tensor).
TEST(BodyDenseMath, GradientsMatchFiniteDifferences) {
  TestStep s = MakeTestStep(SmallModel(), 9, 4, 11);
  auto math = Bodies(s.model, s.batch);
  TestOutput g(s);
  ASSERT_EQ(math->TrainStep(s.Input(), &g.out), "");
  auto loss_at = [&]() {
    TestOutput o(s);
    EXPECT_EQ(math->TrainStep(s.Input(), &o.out), "");
    return o.out.loss;
  };
  const float h = 1e-2f;
  auto check = [&](float* x, float analytic, const std::string& what) {
    const float keep = *x;
    *x = keep + h;
    const double up = loss_at();
    *x = keep - h;
    const double down = loss_at();
    *x = keep;
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << what;
  };
  for (size_t t = 0; t < s.rows.size(); ++t) {
    for (size_t i = 0; i < s.rows[t].size(); i += 3) {
      check(&s.rows[t][i], g.rows[t][i], "row grad of table " + std::to_string(t));
    }
  }
  for (size_t t = 0; t < s.params.size(); ++t) {
    for (size_t i = 0; i < s.params[t].size(); i += 7) {
      check(&s.params[t][i], g.dense[t][i], "dense grad of tensor " + std::to_string(t));
    }
  }
}

TEST(BodyDenseMath, SlicesSumToTheWholeBatch) {
  const TestStep s = MakeTestStep(WideModel(), 50, 20, 5);
  TestOutput one(s), three(s);
  ASSERT_EQ(Bodies(s.model, s.batch, 1)->TrainStep(s.Input(), &one.out), "");
  ASSERT_EQ(Bodies(s.model, s.batch, 3)->TrainStep(s.Input(), &three.out), "");
  EXPECT_NEAR(one.out.loss, three.out.loss, 1e-6);
  for (size_t t = 0; t < one.dense.size(); ++t) {
    EXPECT_LT(MaxRelativeError(three.dense[t], one.dense[t], 1e-4), 1e-3) << "tensor " << t;
  }
  for (size_t t = 0; t < one.rows.size(); ++t) {
    EXPECT_LT(MaxRelativeError(three.rows[t], one.rows[t], 1e-4), 1e-3) << "table " << t;
  }
  EXPECT_EQ(three.probs, one.probs);  // each sample's forward is the same code either way
}

TEST(BodyDenseMath, BadInputIsAnErrorThatNamesIt) {
  TestStep s = MakeTestStep(SmallModel(), 8, 4, 2);
  auto math = Bodies(s.model, 8);
  TestOutput o(s);
  s.index[5] = 4;  // table 2 of sample 1 names row 4 of 4
  EXPECT_NE(math->TrainStep(s.Input(), &o.out).find("names unique row 4 of 4"), std::string::npos);
  s.index[5] = 0;
  StepInput in = s.Input();
  in.batch = 9;
  EXPECT_NE(math->TrainStep(in, &o.out).find("this trainer takes 1..8"), std::string::npos);
  in = s.Input();
  in.rows.pop_back();
  EXPECT_NE(math->TrainStep(in, &o.out).find("rows of 3 tables"), std::string::npos);
  std::string error;
  DlrmConfig bad = SmallModel();
  bad.bottom_mlp = {8, 5};
  EXPECT_EQ(CreateBodyDenseMath(bad, 8, 1, &error), nullptr);
  EXPECT_NE(error.find("last width must equal model.embedding_dim"), std::string::npos);
}

}  // namespace
}  // namespace ecps::gpu
