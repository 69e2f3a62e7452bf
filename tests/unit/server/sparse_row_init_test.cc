// SparseRowInit's kernels: every path this CPU runs (scalar, AVX2,
// AVX-512) gives the scalar loop's rows bit for bit, for every dim from 1 to
// 1024 (multiples of the vector widths and not), both kinds, default and
// explicit scales, several seeds and tables; and the rows are the
// definition's (checksums computed apart, by bench/ctr_replay.py's numpy
// replica). Values are compared as bit patterns: a one-ulp difference fails.
#include "server/sparse_row_init.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

constexpr SparseFillPath kAllPaths[] = {
    SparseFillPath::kScalar, SparseFillPath::kAvx2, SparseFillPath::kAvx512};

std::vector<SparseFillPath> AvailablePaths() {
  std::vector<SparseFillPath> paths;
  for (SparseFillPath path : kAllPaths) {
    if (SparseFillPathAvailable(path)) paths.push_back(path);
  }
  return paths;
}

uint32_t Bits(float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}

SparseRowInit MakeInit(v1::SparseInit::Kind kind, float scale, int dim,
                       uint64_t seed, uint32_t table) {
  v1::SparseInit spec;
  spec.set_kind(kind);
  spec.set_scale(scale);
  auto init = SparseRowInit::Create(spec, dim, seed, table);
  EXPECT_TRUE(init.ok()) << init.status();
  return *std::move(init);
}

// Ids over the whole 64-bit range: small, large, all ones, spread.
std::vector<uint64_t> Ids(size_t n) {
  std::vector<uint64_t> ids = {0, 1, 77, ~uint64_t{0}, uint64_t{1} << 63};
  for (uint64_t k = 1; ids.size() < n; ++k) {
    ids.push_back(k * 0x9e3779b97f4a7c15ULL);
  }
  ids.resize(n);
  return ids;
}

// Rows of `ids` filled by `init`, contiguous, each followed by a guard
// value that Fill must leave alone.
std::vector<float> Rows(const SparseRowInit& init, int dim,
                        const std::vector<uint64_t>& ids) {
  const auto d = static_cast<size_t>(dim);
  std::vector<float> out(ids.size() * (d + 1), -7.5f);
  for (size_t k = 0; k < ids.size(); ++k) {
    init.Fill(ids[k], std::span<float>(out.data() + k * (d + 1), d));
  }
  return out;
}

// Fails (naming the first differing value) unless got and want are the
// same bit patterns.
void ExpectSameBits(const std::vector<float>& got,
                    const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (Bits(got[i]) != Bits(want[i])) {
      ADD_FAILURE() << what << ": value " << i << " is " << got[i] << " (0x"
                    << std::hex << Bits(got[i]) << "), the scalar loop's "
                    << want[i] << " (0x" << Bits(want[i]) << ")";
      return;
    }
  }
}

TEST(SparseRowInitTest, ScalarIsAlwaysAvailableAndTheBestPathIsAvailable) {
  EXPECT_TRUE(SparseFillPathAvailable(SparseFillPath::kScalar));
  EXPECT_TRUE(SparseFillPathAvailable(SparseFillBestPath()));
  // A new initializer uses the best path; WithPath changes only the path.
  const SparseRowInit init = MakeInit(v1::SparseInit::UNIFORM, 0, 8, 1, 2);
  EXPECT_EQ(init.path(), SparseFillBestPath());
  EXPECT_EQ(init.WithPath(SparseFillPath::kScalar).path(),
            SparseFillPath::kScalar);
  // The machine's paths, for the test log.
  for (SparseFillPath path : AvailablePaths()) {
    testing::Test::RecordProperty(SparseFillPathName(path), "available");
  }
}

TEST(SparseRowInitTest, EveryPathGivesTheScalarBitsForEveryDim) {
  // Dims 1 to 1024: every tail length of both vector widths, many times.
  const std::vector<uint64_t> ids = Ids(6);
  for (int dim = 1; dim <= 1024; ++dim) {
    const SparseRowInit init = MakeInit(v1::SparseInit::UNIFORM, 0, dim, 42, 3);
    const std::vector<float> want =
        Rows(init.WithPath(SparseFillPath::kScalar), dim, ids);
    for (SparseFillPath path : AvailablePaths()) {
      ExpectSameBits(Rows(init.WithPath(path), dim, ids), want,
                     std::string(SparseFillPathName(path)) +
                         " dim=" + std::to_string(dim));
    }
  }
}

TEST(SparseRowInitTest, EveryPathGivesTheScalarBitsForKindsScalesAndSeeds) {
  const std::vector<uint64_t> ids = Ids(40);
  const int dims[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 15, 16, 17, 31, 33, 64, 100};
  const v1::SparseInit::Kind kinds[] = {v1::SparseInit::KIND_UNSPECIFIED,
                                        v1::SparseInit::UNIFORM,
                                        v1::SparseInit::NORMAL};
  // 0: the default scale; tiny, large and awkward ones.
  const float scales[] = {0.0f, 0.37f, 1e-30f, 3.0f, 1234.5678f};
  const uint64_t seeds[] = {0, 42, ~uint64_t{0}};
  const uint32_t tables[] = {0, 3, 4000000000U};
  for (v1::SparseInit::Kind kind : kinds) {
    for (float scale : scales) {
      for (uint64_t seed : seeds) {
        for (uint32_t table : tables) {
          for (int dim : dims) {
            const SparseRowInit init = MakeInit(kind, scale, dim, seed, table);
            const std::vector<float> want =
                Rows(init.WithPath(SparseFillPath::kScalar), dim, ids);
            for (SparseFillPath path : AvailablePaths()) {
              ExpectSameBits(Rows(init.WithPath(path), dim, ids), want,
                             std::string(SparseFillPathName(path)) +
                                 " kind=" + std::to_string(kind) +
                                 " scale=" + std::to_string(scale) +
                                 " seed=" + std::to_string(seed) +
                                 " table=" + std::to_string(table) +
                                 " dim=" + std::to_string(dim));
            }
          }
        }
      }
    }
  }
}

TEST(SparseRowInitTest, ZerosOnEveryPath) {
  const std::vector<uint64_t> ids = Ids(4);
  for (SparseFillPath path : AvailablePaths()) {
    const SparseRowInit init =
        MakeInit(v1::SparseInit::ZEROS, 0.5f, 19, 1, 1).WithPath(path);
    const std::vector<float> rows = Rows(init, 19, ids);
    for (size_t i = 0; i < rows.size(); ++i) {
      // Every 20th value is the guard after a row.
      EXPECT_EQ(Bits(rows[i]), Bits(i % 20 == 19 ? -7.5f : 0.0f)) << i;
    }
  }
}

// FNV-1a over the little-endian bytes of the values.
uint64_t Checksum(const std::vector<float>& values) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (float v : values) {
    const uint32_t bits = Bits(v);
    for (int b = 0; b < 4; ++b) {
      h ^= (bits >> (8 * b)) & 0xff;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

TEST(SparseRowInitTest, UniformRowsAreTheDefinitionsOnEveryPath) {
  // The checksums of 256 rows (ids k * 0x9e3779b97f4a7c15, k < 256) as
  // bench/ctr_replay.py's sparse_rows (numpy, apart from this code) makes
  // them: stored rows, replays and exports depend on these values.
  struct Case {
    uint64_t seed;
    uint32_t table;
    int dim;
    float scale;
    uint64_t checksum;
  };
  const Case cases[] = {
      {42, 3, 16, 0.0f, 0xb6ce7cc18e6e18a7ULL},
      {42, 3, 37, 0.0f, 0xe6a35f2c64ea140eULL},
      {7, 0, 1, 0.0f, 0xbbc546903626b521ULL},
      {123456789, 4000000000U, 1024, 0.37f, 0x2176cdda82fba7a0ULL},
  };
  std::vector<uint64_t> ids;
  for (uint64_t k = 0; k < 256; ++k) ids.push_back(k * 0x9e3779b97f4a7c15ULL);
  for (const Case& c : cases) {
    const SparseRowInit init =
        MakeInit(v1::SparseInit::UNIFORM, c.scale, c.dim, c.seed, c.table);
    for (SparseFillPath path : AvailablePaths()) {
      const SparseRowInit with_path = init.WithPath(path);
      std::vector<float> rows(ids.size() * static_cast<size_t>(c.dim));
      for (size_t k = 0; k < ids.size(); ++k) {
        with_path.Fill(ids[k], std::span<float>(rows.data() + k * c.dim,
                                                static_cast<size_t>(c.dim)));
      }
      EXPECT_EQ(Checksum(rows), c.checksum)
          << SparseFillPathName(path) << " dim " << c.dim;
    }
  }
}

TEST(SparseRowInitTest, ALongerSpanThanDimKeepsTheDefinition) {
  // Values past dim (never asked for by the table) hash their index as
  // well: the scalar loop, on every path.
  const SparseRowInit init = MakeInit(v1::SparseInit::UNIFORM, 0, 8, 5, 1);
  for (SparseFillPath path : AvailablePaths()) {
    std::vector<float> longer(11);
    std::vector<float> exact(8);
    init.WithPath(path).Fill(99, longer);
    init.WithPath(SparseFillPath::kScalar).Fill(99, exact);
    longer.resize(8);
    ExpectSameBits(longer, exact, SparseFillPathName(path));
  }
}

}  // namespace
}  // namespace ps
