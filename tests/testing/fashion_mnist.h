// Fashion-MNIST for the integration tests: where Debian's dataset-fashion-mnist
// puts it, and a small MLP job over it.
#ifndef PS_TESTS_TESTING_FASHION_MNIST_H_
#define PS_TESTS_TESTING_FASHION_MNIST_H_

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "ps/v1/job.pb.h"

namespace ps::testing {

inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist/";

// True when the data set is installed (tests skip otherwise).
inline bool HaveFashionMnist() {
  return std::filesystem::exists(
      absl::StrCat(kFashionMnistDir, "train-images-idx3-ubyte.gz"));
}

// A job spec training an MLP 784-`hidden`-10 with Adam on the first
// `max_train` training and `max_test` test images, 1 epoch, batch 32, one
// server and one worker; tests change what they need.
inline v1::JobSpec FashionMnistMlpJob(const std::string& name, int hidden,
                                      int64_t max_train, int64_t max_test) {
  v1::JobSpec spec;
  spec.set_name(name);
  v1::ModelSpec* m = spec.mutable_model();
  m->set_kind(v1::ModelSpec::MLP);
  m->set_input_dim(784);
  m->set_num_classes(10);
  m->add_hidden_layers(hidden);
  v1::DatasetSpec* d = spec.mutable_dataset();
  d->set_format(v1::DatasetSpec::IDX);
  d->set_train_images(
      absl::StrCat(kFashionMnistDir, "train-images-idx3-ubyte.gz"));
  d->set_train_labels(
      absl::StrCat(kFashionMnistDir, "train-labels-idx1-ubyte.gz"));
  d->set_test_images(
      absl::StrCat(kFashionMnistDir, "t10k-images-idx3-ubyte.gz"));
  d->set_test_labels(
      absl::StrCat(kFashionMnistDir, "t10k-labels-idx1-ubyte.gz"));
  d->set_max_train_samples(max_train);
  d->set_max_test_samples(max_test);
  spec.set_epochs(1);
  spec.set_batch_size(32);
  spec.set_seed(1);
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.002f);
  spec.set_num_workers(1);
  spec.set_num_servers(1);
  return spec;
}

}  // namespace ps::testing

#endif  // PS_TESTS_TESTING_FASHION_MNIST_H_
