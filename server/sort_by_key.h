// Sorting entries by a distinct 64-bit key, faster than std::sort for keys
// spread over their range as hashed ids are (docs/sparse.md, "Speed"): a
// snapshot's rows of a bucket, a BSP clock's averaged rows.
#ifndef PS_SERVER_SORT_BY_KEY_H_
#define PS_SERVER_SORT_BY_KEY_H_

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ps {

// Sorts [first, last) by key_of(entry) (a uint64_t, distinct per entry,
// so the order is the one std::sort gives): the entries grouped by the
// leading bits of key - min (about four a group for keys spread over
// their range) with a counting sort through `scratch`, then each group
// sorted on its own (insertion for a few, std::sort for more, so that
// clustered keys cost no more than a plain sort). `scratch` and `count`
// are working memory, kept by the caller to be reused.
template <typename Entry, typename KeyOf>
void SortByKey(Entry* first, Entry* last, KeyOf key_of,
               std::vector<Entry>* scratch, std::vector<uint32_t>* count) {
  const auto by_key = [&key_of](const Entry& x, const Entry& y) {
    return key_of(x) < key_of(y);
  };
  const auto n = static_cast<size_t>(last - first);
  if (n < 64) {
    std::sort(first, last, by_key);
    return;
  }
  uint64_t lo = key_of(*first);
  uint64_t hi = lo;
  for (const Entry* e = first; e != last; ++e) {
    lo = std::min(lo, key_of(*e));
    hi = std::max(hi, key_of(*e));
  }
  const int bits = std::bit_width(n) - 2;
  const int span_bits = std::bit_width(hi - lo);
  const int shift = span_bits > bits ? span_bits - bits : 0;
  const size_t groups = static_cast<size_t>((hi - lo) >> shift) + 1;
  count->assign(groups + 1, 0);
  for (const Entry* e = first; e != last; ++e) {
    ++(*count)[((key_of(*e) - lo) >> shift) + 1];
  }
  for (size_t g = 0; g < groups; ++g) (*count)[g + 1] += (*count)[g];
  scratch->resize(n);
  std::vector<uint32_t> next(count->begin(), count->end() - 1);
  for (const Entry* e = first; e != last; ++e) {
    (*scratch)[next[(key_of(*e) - lo) >> shift]++] = *e;
  }
  for (size_t g = 0; g < groups; ++g) {
    Entry* begin = scratch->data() + (*count)[g];
    Entry* end = scratch->data() + (*count)[g + 1];
    if (end - begin > 16) {
      std::sort(begin, end, by_key);
      continue;
    }
    for (Entry* i = begin + 1; i < end; ++i) {
      const Entry moved = *i;
      Entry* j = i;
      for (; j > begin && key_of(moved) < key_of(*(j - 1)); --j) *j = *(j - 1);
      *j = moved;
    }
  }
  std::copy(scratch->begin(), scratch->end(), first);
}

}  // namespace ps

#endif  // PS_SERVER_SORT_BY_KEY_H_
