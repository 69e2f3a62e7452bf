// paramserver._native: the Python SDK's compiled transport (docs/python.md,
// "The compiled transport"), StepClient (step_client.h) bound with pybind11.
// Every call that copies values or waits for a server releases the GIL; the
// gradients are read from, and the parameters written into, the caller's
// float32 buffers (buffer protocol: numpy arrays, torch tensors' .numpy()).
// A job with sparse tables passes, per table, a buffer of int64 ids and one
// of float32 rows or row gradients (ids * dim values): one copy each, no
// per-row Python work. A buffer of a wrong type raises TypeError or
// ValueError; a wrong length, CallError(INVALID_ARGUMENT).
// Errors raise CallError(code, message), `code` a grpc.StatusCode's number;
// paramserver._native_step turns it into the SDK's ParamServerError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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

// Whether a buffer's format is `type` ('f', 'q'...), native or little-endian.
bool IsFormat(const std::string& format, const char* types) {
  std::string_view f(format);
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@')) {
    f.remove_prefix(1);
  }
  return f.size() == 1 &&
         std::string_view(types).find(f[0]) != std::string_view::npos;
}

// A C-contiguous buffer of `itemsize`-byte items of a format in `types`
// (writable if asked); ValueError naming `what` otherwise.
py::buffer_info Checked(const py::handle& object, bool writable,
                        const std::string& what, const char* types,
                        ssize_t itemsize, const char* type_name) {
  if (!PyObject_CheckBuffer(object.ptr())) {
    throw py::type_error(what + ": not a buffer (a numpy array of " +
                         type_name + ")");
  }
  py::buffer_info info =
      py::reinterpret_borrow<py::buffer>(object).request(writable);
  if (info.itemsize != itemsize || !IsFormat(info.format, types)) {
    throw py::value_error(what + ": not " + type_name);
  }
  ssize_t expected = itemsize;
  for (ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expected) {
      throw py::value_error(what + ": not contiguous");
    }
    expected *= info.shape[d];
  }
  return info;
}

// A C-contiguous float32 buffer (writable if asked).
py::buffer_info Floats(const py::handle& buffer, bool writable,
                       const std::string& what) {
  return Checked(buffer, writable, what, "f", sizeof(float), "float32");
}

// Per table: the int64 ids (buffers kept alive in `infos`).
std::vector<std::span<const int64_t>> IdSpans(
    const py::sequence& ids, std::vector<py::buffer_info>& infos) {
  std::vector<std::span<const int64_t>> spans;
  for (size_t t = 0; t < ids.size(); ++t) {
    infos.push_back(Checked(ids[t], /*writable=*/false,
                            "ids[" + std::to_string(t) + "]", "qlQL",
                            sizeof(int64_t), "int64"));
    spans.emplace_back(static_cast<const int64_t*>(infos.back().ptr),
                       static_cast<size_t>(infos.back().size));
  }
  return spans;
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

void StartPush(StepClient& client, int64_t clock, const py::buffer& grads,
               const std::optional<py::sequence>& ids,
               const std::optional<py::sequence>& row_grads) {
  py::buffer_info info = Floats(grads, /*writable=*/false, "gradients");
  const std::span<const float> dense(static_cast<const float*>(info.ptr),
                                     static_cast<size_t>(info.size));
  if (ids.has_value() != row_grads.has_value()) {
    throw py::value_error("ids and row_grads: both or neither");
  }
  absl::Status status;
  if (!ids.has_value()) {
    py::gil_scoped_release release;
    status = client.StartPush(clock, dense);
  } else {
    std::vector<py::buffer_info> infos;
    std::vector<std::span<const int64_t>> id_spans = IdSpans(*ids, infos);
    std::vector<std::span<const float>> grad_spans;
    for (size_t t = 0; t < row_grads->size(); ++t) {
      infos.push_back(Floats((*row_grads)[t], /*writable=*/false,
                             "row_grads[" + std::to_string(t) + "]"));
      grad_spans.emplace_back(static_cast<const float*>(infos.back().ptr),
                              static_cast<size_t>(infos.back().size));
    }
    py::gil_scoped_release release;
    status = client.StartPushRows(clock, dense, id_spans, grad_spans);
  }
  Check(status);
}

void StartPull(StepClient& client, int64_t clock,
               const std::optional<py::sequence>& ids) {
  absl::Status status;
  if (!ids.has_value()) {
    status = client.StartPull(clock);
  } else {
    std::vector<py::buffer_info> infos;
    std::vector<std::span<const int64_t>> spans = IdSpans(*ids, infos);
    py::gil_scoped_release release;
    status = client.StartPullRows(clock, spans);
  }
  Check(status);
}

void FinishPull(StepClient& client, const py::buffer& out,
                const std::optional<py::sequence>& rows) {
  py::buffer_info info = Floats(out, /*writable=*/true, "parameters");
  const std::span<float> dense(static_cast<float*>(info.ptr),
                               static_cast<size_t>(info.size));
  absl::Status status;
  if (!rows.has_value()) {
    py::gil_scoped_release release;
    status = client.FinishPull(dense);
  } else {
    std::vector<py::buffer_info> infos;
    std::vector<std::span<float>> spans;
    for (size_t t = 0; t < rows->size(); ++t) {
      infos.push_back(Floats((*rows)[t], /*writable=*/true,
                             "rows[" + std::to_string(t) + "]"));
      spans.emplace_back(static_cast<float*>(infos.back().ptr),
                         static_cast<size_t>(infos.back().size));
    }
    py::gil_scoped_release release;
    status = client.FinishPullRows(dense, spans);
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
      .def_property_readonly("table_dims", &StepClient::table_dims)
      .def("start_push", &ps::python::StartPush, py::arg("clock"),
           py::arg("grads"), py::arg("ids") = py::none(),
           py::arg("row_grads") = py::none())
      .def("finish_push", &ps::python::Released<&StepClient::FinishPush>)
      .def("start_pull", &ps::python::StartPull, py::arg("clock"),
           py::arg("ids") = py::none())
      .def("finish_pull", &ps::python::FinishPull, py::arg("out"),
           py::arg("rows") = py::none())
      .def_property_readonly("pulling", &StepClient::pulling)
      .def("cancel", &StepClient::Cancel)
      .def_property_readonly("pushed_bytes", &StepClient::pushed_bytes)
      .def_property_readonly("pulled_bytes", &StepClient::pulled_bytes)
      .def_property_readonly("pulls_made", &StepClient::pulls_made);
}
