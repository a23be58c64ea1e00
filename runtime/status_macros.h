// Status helpers shared by every module.
//
// RETURN_IF_ERROR(expr): evaluates an absl::Status expression; returns it from the
// enclosing function when it is not OK.
// ASSIGN_OR_RETURN(lhs, expr): evaluates an absl::StatusOr<T>; on error returns its status,
// otherwise move-assigns the value to `lhs` (which may be a declaration: `auto x`).
#ifndef ECPS_RUNTIME_STATUS_MACROS_H_
#define ECPS_RUNTIME_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ECPS_STATUS_CONCAT_INNER_(a, b) a##b
#define ECPS_STATUS_CONCAT_(a, b) ECPS_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                                    \
  do {                                                           \
    ::absl::Status ecps_status_ = (expr);                        \
    if (!ecps_status_.ok()) return ecps_status_;                 \
  } while (0)

#define ECPS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  ECPS_ASSIGN_OR_RETURN_IMPL_(ECPS_STATUS_CONCAT_(ecps_statusor_, __LINE__), lhs, expr)

#endif  // ECPS_RUNTIME_STATUS_MACROS_H_
