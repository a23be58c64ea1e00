// The one place a job spec becomes the kernels' own config types, so that kernels/ knows
// nothing of the spec (its core library does not link it) while every caller that holds a
// spec converts the same way.
#ifndef ECPS_DOMAIN_SPEC_CONFIG_H_
#define ECPS_DOMAIN_SPEC_CONFIG_H_

#include "kernels/dlrm.h"
#include "kernels/optimizers.h"
#include "runtime/spec.h"

namespace ecps {

DlrmConfig ToDlrmConfig(const ModelSection& model);
SparseOptimizerConfig ToSparseOptimizerConfig(const SparseOptimizer& optimizer);
DenseOptimizerConfig ToDenseOptimizerConfig(const DenseOptimizer& optimizer);

}  // namespace ecps

#endif  // ECPS_DOMAIN_SPEC_CONFIG_H_
