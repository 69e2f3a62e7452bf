#include "common/dataset_reader.h"

#include "absl/status/status.h"
#include "common/csv_reader.h"
#include "common/libsvm_reader.h"

namespace ps {

absl::StatusOr<Dataset> ReadDataset(const v1::DatasetSpec& dataset, bool train,
                                    int64_t input_dim) {
  const int64_t max_samples =
      train ? dataset.max_train_samples() : dataset.max_test_samples();
  switch (dataset.format()) {
    case v1::DatasetSpec::IDX:
      return ReadIdxDataset(FeaturesPath(dataset, train),
                            LabelsPath(dataset, train), max_samples);
    case v1::DatasetSpec::CSV:
      return ReadCsvDataset(FeaturesPath(dataset, train),
                            {.dim = input_dim,
                             .header = dataset.csv_header(),
                             .max_samples = max_samples});
    case v1::DatasetSpec::LIBSVM:
      return ReadLibsvmDataset(FeaturesPath(dataset, train),
                               {.dim = input_dim, .max_samples = max_samples});
    default:
      break;
  }
  return absl::InvalidArgumentError(
      "dataset.format: must be IDX, CSV or LIBSVM");
}

const std::string& LabelsPath(const v1::DatasetSpec& dataset, bool train) {
  if (dataset.format() == v1::DatasetSpec::IDX) {
    return train ? dataset.train_labels() : dataset.test_labels();
  }
  return train ? dataset.train_file() : dataset.test_file();
}

const std::string& FeaturesPath(const v1::DatasetSpec& dataset, bool train) {
  if (dataset.format() == v1::DatasetSpec::IDX) {
    return train ? dataset.train_images() : dataset.test_images();
  }
  return train ? dataset.train_file() : dataset.test_file();
}

}  // namespace ps
