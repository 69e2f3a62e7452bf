// The Criteo display-advertising format's shape (DatasetSpec.CRITEO;
// docs/sparse.md, "Data"), shared by the reader and the job spec's checks.
#ifndef PS_COMMON_CRITEO_FORMAT_H_
#define PS_COMMON_CRITEO_FORMAT_H_

#include <cstdint>

namespace ps {

// After the label, this many integer (dense) features I1..I13, then this many
// categorical fields C1..C26.
inline constexpr int32_t kCriteoDenseFeatures = 13;
inline constexpr int32_t kCriteoFields = 26;

}  // namespace ps

#endif  // PS_COMMON_CRITEO_FORMAT_H_
