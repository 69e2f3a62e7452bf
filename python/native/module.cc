// paramserver._native: the Python SDK's compiled transport (docs/python.md,
// "The compiled transport"), StepClient (step_client.h) bound with pybind11.
// Every call that copies values or waits for a server releases the GIL; the
// gradients are read from, and the parameters written into, the caller's
// float32 buffers (buffer protocol: numpy arrays, torch tensors' .numpy()).
// Errors raise CallError(code, message), `code` a grpc.StatusCode's number;
// paramserver._native_step turns it into the SDK's ParamServerError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "python/native/step_client.h"

namespace py = pybind11;

namespace ps::python {
namespace {

// The exception type CallError, set once the module is imported.
PyObject* call_error = nullptr;

[[noreturn]] void Raise(const absl::Status& status) {
  py::object args = py::make_tuple(static_cast<int>(status.code()),
                                   std::string(status.message()));
  PyErr_SetObject(call_error, args.ptr());
  throw py::error_already_set();
}

void Check(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

// A C-contiguous float32 buffer of `values` values (writable if asked).
py::buffer_info Floats(const py::buffer& buffer, bool writable,
                       const char* what) {
  py::buffer_info info = buffer.request(writable);
  if (info.itemsize != sizeof(float) ||
      (info.format != "f" && info.format != "<f" && info.format != "=f")) {
    throw py::value_error(std::string(what) + ": not float32");
  }
  int64_t expected = static_cast<int64_t>(sizeof(float));
  for (int64_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expected) {
      throw py::value_error(std::string(what) + ": not contiguous");
    }
    expected *= info.shape[d];
  }
  return info;
}

std::unique_ptr<StepClient> Create(
    const py::bytes& assignment, double pull_timeout, double push_timeout,
    double retry_window, bool shared_payloads, bool tls,
    const std::string& ca_pem, const std::string& cert_pem,
    const std::string& key_pem, const std::string& server_name,
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  v1::Assignment parsed;
  if (!parsed.ParseFromString(std::string(assignment))) {
    Raise(absl::InvalidArgumentError("assignment: not a v1.Assignment"));
  }
  StepClientOptions options;
  options.pull_timeout = absl::Seconds(pull_timeout);
  options.push_timeout = absl::Seconds(push_timeout);
  options.retry_window = absl::Seconds(retry_window);
  options.shared_payloads = shared_payloads;
  options.channel.tls = tls;
  options.channel.ca_pem = ca_pem;
  options.channel.cert_pem = cert_pem;
  options.channel.key_pem = key_pem;
  options.channel.server_name_override = server_name;
  options.channel.call_metadata = metadata;
  absl::StatusOr<std::unique_ptr<StepClient>> client;
  {
    py::gil_scoped_release release;
    client = StepClient::Create(parsed, std::move(options));
  }
  if (!client.ok()) Raise(client.status());
  return *std::move(client);
}

void StartPush(StepClient& client, int64_t clock, const py::buffer& grads) {
  py::buffer_info info = Floats(grads, /*writable=*/false, "gradients");
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = client.StartPush(
        clock, std::span<const float>(static_cast<const float*>(info.ptr),
                                      static_cast<size_t>(info.size)));
  }
  Check(status);
}

void FinishPull(StepClient& client, const py::buffer& out) {
  py::buffer_info info = Floats(out, /*writable=*/true, "parameters");
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = client.FinishPull(std::span<float>(
        static_cast<float*>(info.ptr), static_cast<size_t>(info.size)));
  }
  Check(status);
}

template <absl::Status (StepClient::*Method)()>
void Released(StepClient& client) {
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = (client.*Method)();
  }
  Check(status);
}

}  // namespace
}  // namespace ps::python

PYBIND11_MODULE(_native, m) {
  using ps::python::StepClient;
  m.doc() = "The paramserver SDK's compiled transport (docs/python.md).";
  static py::exception<std::exception> error(m, "CallError");
  ps::python::call_error = error.ptr();
  py::class_<StepClient>(m, "StepClient")
      .def(py::init(&ps::python::Create), py::arg("assignment"),
           py::arg("pull_timeout"), py::arg("push_timeout"),
           py::arg("retry_window"), py::arg("shared_payloads"),
           py::arg("tls") = false, py::arg("ca_pem") = "",
           py::arg("cert_pem") = "", py::arg("key_pem") = "",
           py::arg("server_name") = "",
           py::arg("metadata") =
               std::vector<std::pair<std::string, std::string>>{})
      .def_property_readonly("size", &StepClient::size)
      .def_property_readonly("tensor_sizes", &StepClient::tensor_sizes)
      .def("start_push", &ps::python::StartPush, py::arg("clock"),
           py::arg("grads"))
      .def("finish_push", &ps::python::Released<&StepClient::FinishPush>)
      .def("start_pull",
           [](StepClient& client, int64_t clock) {
             ps::python::Check(client.StartPull(clock));
           })
      .def("finish_pull", &ps::python::FinishPull, py::arg("out"))
      .def_property_readonly("pulling", &StepClient::pulling)
      .def("cancel", &StepClient::Cancel)
      .def_property_readonly("pushed_bytes", &StepClient::pushed_bytes)
      .def_property_readonly("pulled_bytes", &StepClient::pulled_bytes)
      .def_property_readonly("pulls_made", &StepClient::pulls_made);
}
