// Early-return macros for absl::Status and absl::StatusOr, so that a
// function's steps read one to a line instead of `if (!s.ok()) return s;`.
#ifndef PS_COMMON_STATUS_MACROS_H_
#define PS_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Evaluates `expr` (an absl::Status) and returns it from the enclosing
// function if it is not OK.
#define PS_RETURN_IF_ERROR(expr)                                \
  do {                                                          \
    if (::absl::Status ps_status_ = (expr); !ps_status_.ok()) { \
      return ps_status_;                                        \
    }                                                           \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); returns its status from the
// enclosing function if it is not OK, and otherwise moves its value into
// `lhs`, which may declare a variable:
//   PS_ASSIGN_OR_RETURN(auto model, Model::Create(spec, backend));
//   PS_ASSIGN_OR_RETURN(test_, ReadIdxDataset(...));
#define PS_ASSIGN_OR_RETURN(lhs, rexpr)                                     \
  PS_ASSIGN_OR_RETURN_IMPL_(PS_STATUS_CONCAT_(ps_statusor_, __LINE__), lhs, \
                            rexpr)

#define PS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr)    \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#define PS_STATUS_CONCAT_INNER_(a, b) a##b
#define PS_STATUS_CONCAT_(a, b) PS_STATUS_CONCAT_INNER_(a, b)

#endif  // PS_COMMON_STATUS_MACROS_H_
