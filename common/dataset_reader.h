// Reading a job's data set in whichever format its spec names (IDX, CSV,
// libsvm).
#ifndef PS_COMMON_DATASET_READER_H_
#define PS_COMMON_DATASET_READER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/idx_reader.h"
#include "ps/v1/job.pb.h"

namespace ps {

// Reads the training part (`train`) or the test part of `dataset`, keeping
// at most its max_train_samples / max_test_samples samples: IDX from the
// images and labels files (ReadIdxDataset), CSV (ReadCsvDataset, header as
// csv_header) or LIBSVM (ReadLibsvmDataset) from train_file / test_file
// with `input_dim` values per sample. Thread-safe. Errors: the reader's
// (NOT_FOUND naming the path, INVALID_ARGUMENT naming the file and line);
// INVALID_ARGUMENT for another format.
absl::StatusOr<Dataset> ReadDataset(const v1::DatasetSpec& dataset, bool train,
                                    int64_t input_dim);

// The file the labels of that part come from (for messages): the labels
// file of IDX, the data file of the text formats.
const std::string& LabelsPath(const v1::DatasetSpec& dataset, bool train);

// The file the features of that part come from (for messages).
const std::string& FeaturesPath(const v1::DatasetSpec& dataset, bool train);

}  // namespace ps

#endif  // PS_COMMON_DATASET_READER_H_
