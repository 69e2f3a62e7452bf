#include "server/sparse_row_init.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace ps {
namespace {

// Distinct salts keep the streams of initial values and admission draws
// apart.
constexpr uint64_t kInitSalt = 0x5ba7e1f0c0ffee01ULL;
constexpr uint64_t kAdmitSalt = 0x0ad317c0a11ed002ULL;

uint64_t Stream(uint64_t salt, uint64_t job_seed, uint32_t table_index) {
  return SparseHashCombine(SparseHashCombine(SparseMix64(salt), job_seed),
                           table_index);
}

}  // namespace

uint64_t SparseMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t SparseHashCombine(uint64_t h, uint64_t word) {
  return SparseMix64(h ^ SparseMix64(word));
}

double SparseUnitDouble(uint64_t bits) {
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

bool SparseAdmissionDraw(uint64_t job_seed, uint32_t table_index, uint64_t id,
                         int64_t clock, double probability) {
  const uint64_t h = SparseHashCombine(
      SparseHashCombine(Stream(kAdmitSalt, job_seed, table_index), id),
      static_cast<uint64_t>(clock));
  return SparseUnitDouble(h) < probability;
}

absl::StatusOr<SparseRowInit> SparseRowInit::Create(const v1::SparseInit& init,
                                                    int dim, uint64_t job_seed,
                                                    uint32_t table_index) {
  const float scale = init.scale();
  if (!std::isfinite(scale) || scale < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("init.scale must be finite and >= 0, got ", scale));
  }
  v1::SparseInit::Kind kind = init.kind();
  double resolved = scale;
  switch (kind) {
    case v1::SparseInit::KIND_UNSPECIFIED:
    case v1::SparseInit::UNIFORM:
      kind = v1::SparseInit::UNIFORM;
      if (scale == 0) resolved = 1.0 / std::sqrt(static_cast<double>(dim));
      break;
    case v1::SparseInit::NORMAL:
      if (scale == 0) resolved = 0.01;
      break;
    case v1::SparseInit::ZEROS:
      resolved = 0;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("init.kind ", static_cast<int>(kind), " is unknown"));
  }
  return SparseRowInit(kind, resolved, Stream(kInitSalt, job_seed, table_index),
                       dim);
}

SparseRowInit::SparseRowInit(v1::SparseInit::Kind kind, double scale,
                             uint64_t stream, int dim)
    : kind_(kind), scale_(scale), stream_(stream), path_(SparseFillBestPath()) {
  index_mix_.resize(static_cast<size_t>(dim > 0 ? dim : 0));
  for (size_t i = 0; i < index_mix_.size(); ++i) {
    index_mix_[i] = SparseMix64(i);
  }
}

SparseRowInit SparseRowInit::WithPath(SparseFillPath path) const {
  PS_CHECK(SparseFillPathAvailable(path), "sparse init: path ",
           SparseFillPathName(path), " is not available on this CPU");
  SparseRowInit copy = *this;
  copy.path_ = path;
  return copy;
}

void SparseRowInit::Fill(uint64_t id, std::span<float> out) const {
  if (zeros()) {
    for (float& v : out) v = 0.0f;
    return;
  }
  const uint64_t row = SparseHashCombine(stream_, id);
  if (kind_ == v1::SparseInit::UNIFORM && out.size() <= index_mix_.size()) {
    switch (path_) {
      case SparseFillPath::kAvx512:
        SparseUniformRowAvx512(row, index_mix_.data(), out.size(), scale_,
                               out.data());
        return;
      case SparseFillPath::kAvx2:
        SparseUniformRowAvx2(row, index_mix_.data(), out.size(), scale_,
                             out.data());
        return;
      case SparseFillPath::kScalar:
        break;
    }
  }
  // Equal to SparseHashCombine(row, i), with SparseMix64(i) precomputed.
  const auto hash = [this, row](size_t i) {
    return SparseMix64(
        row ^ (i < index_mix_.size() ? index_mix_[i] : SparseMix64(i)));
  };
  if (kind_ == v1::SparseInit::UNIFORM) {
    // The reference the vector kernels (server/sparse_row_init_simd.h)
    // equal bit for bit.
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] =
          static_cast<float>((2.0 * SparseUnitDouble(hash(i)) - 1.0) * scale_);
    }
    return;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t h = hash(i);
    // Box-Muller from two independent uniforms; u1 in (0, 1].
    const double u1 = 1.0 - SparseUnitDouble(h);
    const double u2 = SparseUnitDouble(SparseMix64(h));
    out[i] = static_cast<float>(scale_ * std::sqrt(-2.0 * std::log(u1)) *
                                std::cos(2.0 * std::numbers::pi * u2));
  }
}

}  // namespace ps
