// The YAML names of the spec's enums (runtime/spec.h), in the order of their enumerators: what
// the field tables parse and render (spec_fields.cc) and ToString returns. Internal to the
// spec's implementation.
#ifndef ECPS_RUNTIME_SPEC_ENUM_NAMES_H_
#define ECPS_RUNTIME_SPEC_ENUM_NAMES_H_

#include <cstddef>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/spec.h"

namespace ecps {
namespace spec_internal {

// Names of an enum's values, in the order of its enumerators (the value is the index).
template <typename E>
struct EnumNames;
template <>
struct EnumNames<FaultToleranceMode> {
  static constexpr const char* kNames[] = {"none", "erasure_code", "replication", "checkpoint"};
};
template <>
struct EnumNames<AckPolicy> {
  static constexpr const char* kNames[] = {"after_parity", "async"};
};
template <>
struct EnumNames<ParityTransport> {
  static constexpr const char* kNames[] = {"grpc", "tcp"};
};
template <>
struct EnumNames<FaultAction> {
  static constexpr const char* kNames[] = {"kill_server", "stop_server", "kill_worker",
                                           "kill_coordinator"};
};
template <>
struct EnumNames<SparseOptimizerType> {
  static constexpr const char* kNames[] = {"sgd", "adagrad", "rowwise_adagrad"};
};
template <>
struct EnumNames<DenseOptimizerType> {
  static constexpr const char* kNames[] = {"sgd", "adagrad", "adam"};
};
template <>
struct EnumNames<DataSourceType> {
  static constexpr const char* kNames[] = {"synthetic", "criteo_tsv", "criteo_csv"};
};
template <>
struct EnumNames<PoolingType> {
  static constexpr const char* kNames[] = {"sum", "mean"};
};
template <>
struct EnumNames<WorkerDevice> {
  static constexpr const char* kNames[] = {"cpu", "cuda"};
};
template <>
struct EnumNames<AbftSetting> {
  static constexpr const char* kNames[] = {"off", "detect", "auto"};
};
template <>
struct EnumNames<StateStoreType> {
  static constexpr const char* kNames[] = {"file", "etcd"};
};

template <typename E>
inline const char* NameOf(E value) {
  return EnumNames<E>::kNames[static_cast<size_t>(value)];
}

template <typename E>
inline std::vector<std::string> AllNames() {
  return std::vector<std::string>(std::begin(EnumNames<E>::kNames), std::end(EnumNames<E>::kNames));
}

}  // namespace spec_internal
}  // namespace ecps

#endif  // ECPS_RUNTIME_SPEC_ENUM_NAMES_H_
