// Model files with sparse tables (PSMODEL2; psctl submit --init_from and
// every server of such a job read them): the table reader on hostile bytes,
// and, for a file that reads, a write and read back of its tensors and rows
// that must give the same model and rows.
#include <cstdint>
#include <string>

#include "common/model_file.h"
#include "common/model_tables.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ps::fuzz::WriteScratch(
      "tables.bin", reinterpret_cast<const char*>(data), size);
  auto model = ps::ReadModelFile(path);
  if (!model.ok()) return 0;  // fuzz_model_file covers the header.
  auto tables = ps::ReadAllModelTables(path);
  if (!tables.ok()) {
    PS_FUZZ_REQUIRE(tables.status().code() == absl::StatusCode::kDataLoss,
                    tables.status().ToString());
    return 0;
  }
  const std::string copy = ps::fuzz::ScratchDir() + "/tables-copy.bin";
  auto writer = ps::ModelFileWriter::Create(*model, copy);
  PS_FUZZ_REQUIRE(writer.ok(), writer.status().ToString());
  for (size_t t = 0; t < tables->size(); ++t) {
    const absl::Status s = (*writer)->AppendRows(
        static_cast<uint32_t>(t), (*tables)[t].ids, (*tables)[t].values);
    PS_FUZZ_REQUIRE(s.ok(), s.ToString());
  }
  const absl::Status finished = (*writer)->Finish();
  PS_FUZZ_REQUIRE(finished.ok(), finished.ToString());
  auto again = ps::ReadAllModelTables(copy);
  PS_FUZZ_REQUIRE(again.ok(), again.status().ToString());
  PS_FUZZ_REQUIRE(again->size() == tables->size(), "table count changed");
  for (size_t t = 0; t < tables->size(); ++t) {
    PS_FUZZ_REQUIRE((*again)[t].ids == (*tables)[t].ids &&
                        (*again)[t].values.size() == (*tables)[t].values.size(),
                    "rows changed on a write and read back");
  }
  return 0;
}
