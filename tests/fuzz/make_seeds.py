#!/usr/bin/env python3
"""Writes the hand-made seeds of tests/fuzz/corpus/ (run from the repository
root; needs protoc). The checked-in corpus is these seeds merged with what
longer fuzz runs found (libFuzzer -merge=1, docs/security.md)."""
import gzip
import os
import random
import struct
import subprocess

ROOT = "tests/fuzz/corpus"


def write(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def encode(message, text):
    return subprocess.run(
        ["protoc", "--proto_path=proto", f"--encode=ps.v1.{message}",
         "ps/v1/job_service.proto", "ps/v1/cluster.proto",
         "ps/v1/parameter.proto", "ps/v1/job.proto"],
        input=text.encode(), check=True, capture_output=True).stdout


SPEC = """
name: "fashion-mnist-mlp"
model { kind: MLP input_dim: 784 num_classes: 10 hidden_layers: 256
        hidden_layers: 128 activation: RELU }
dataset { format: IDX train_images: "/data/train-images-idx3-ubyte.gz"
          train_labels: "/data/train-labels-idx1-ubyte.gz"
          test_images: "/data/t10k-images-idx3-ubyte.gz"
          test_labels: "/data/t10k-labels-idx1-ubyte.gz"
          max_train_samples: 1000 max_test_samples: 100 }
epochs: 2 batch_size: 64 seed: 42
optimizer { adam { learning_rate: 0.001 } }
consistency { model: SSP staleness: 2 worker_cache: true }
num_workers: 2 num_servers: 2 block_elems: 16384 durability: WAL
non_finite_gradients: NON_FINITE_DROP
"""
SPEC_SGD = SPEC.replace("adam { learning_rate: 0.001 }",
                        "sgd { learning_rate: 0.1 momentum: 0.9 "
                        "weight_decay: 0.0001 }").replace(
                            "model: SSP staleness: 2 worker_cache: true",
                            "model: BSP")

SPEC_EXTERNAL = """
name: "pytorch"
model { kind: EXTERNAL
        tensors { name: "features.0.weight" shape: 16 shape: 1 shape: 3 shape: 3 }
        tensors { name: "features.1.weight" shape: 16 init: CONSTANT value: 1 }
        tensors { name: "features.1.bias" shape: 16 init: ZEROS }
        tensors { name: "fc.weight" shape: 10 shape: 16 init: HE_UNIFORM }
        tensors { name: "fc.bias" shape: 10 init: XAVIER_UNIFORM fan_in: 16
                  fan_out: 10 }
        tensors { name: "scale" init: FROM_WORKER } }
epochs: 1 batch_size: 8 seed: 3
optimizer { sgd { learning_rate: 0.1 } }
num_workers: 2 num_servers: 2 durability: MEMORY
mixed_precision { wire_gradients: BF16 }
"""
SPEC_WIRE16 = SPEC_SGD + "mixed_precision { wire_gradients: FP16 wire_parameters: BF16 }\n"


JSON_SPECS = {
    "external.json": b"""{"name": "pytorch", "model": {"kind": "EXTERNAL",
 "tensors": [{"name": "conv.weight", "shape": ["16", "1", "3", "3"]},
 {"name": "bn.weight", "shape": ["16"], "init": "CONSTANT", "value": 1},
 {"name": "bn.bias", "shape": ["16"], "init": "ZEROS"},
 {"name": "fc.weight", "shape": ["10", "16"], "init": "HE_UNIFORM"},
 {"name": "fc.bias", "shape": ["10"], "init": "XAVIER_UNIFORM",
  "fanIn": "16"}]}, "epochs": 1, "batch_size": 8,
 "optimizer": {"adam": {"learning_rate": 0.001}}, "num_workers": 2,
 "num_servers": 2, "durability": "MEMORY"}""",
    "mlp.json": open("deploy/jobs/fashion-mnist-mlp.json", "rb").read(),
    "ssp-drop.json": b"""{"name": "s", "model": {"kind": "SOFTMAX_REGRESSION",
 "input_dim": 4, "num_classes": 3}, "dataset": {"format": "IDX",
 "train_images": "a", "train_labels": "b", "test_images": "c",
 "test_labels": "d", "max_train_samples": "10"}, "epochs": 1,
 "batch_size": 1, "seed": "18446744073709551615",
 "optimizer": {"sgd": {"learning_rate": 0.5, "momentum": 0.5}},
 "consistency": {"model": "SSP", "staleness": 3, "worker_cache": true},
 "num_workers": 3, "num_servers": 1, "block_elems": 1,
 "durability": "MEMORY", "non_finite_gradients": "NON_FINITE_DROP"}""",
    "asp-adam.json": b"""{"model": {"kind": "MLP", "input_dim": 784,
 "num_classes": 10, "hidden_layers": [2147483647, 1], "activation": "TANH"},
 "dataset": {"format": "IDX", "train_images": "x", "train_labels": "y",
 "test_images": "z", "test_labels": "w"}, "epochs": 3, "batch_size": 64,
 "optimizer": {"adam": {"learning_rate": 1e-3, "beta1": 0.8, "beta2": 0.99,
 "epsilon": 1e-7, "weight_decay": 0.01}}, "consistency": {"model": "ASP"},
 "num_workers": 1024, "num_servers": 1, "durability": "SYNC"}""",
    "wire-parameters.json": b"""{"name": "w", "model": {"kind":
 "SOFTMAX_REGRESSION", "input_dim": 4, "num_classes": 3}, "dataset":
 {"format": "IDX", "train_images": "a", "train_labels": "b", "test_images":
 "c", "test_labels": "d"}, "epochs": 1, "batch_size": 2, "optimizer": {"sgd":
 {"learning_rate": 0.5}}, "num_workers": 2, "num_servers": 1,
 "mixed_precision": {"wire_parameters": "FP16", "wire_gradients": "BF16"}}""",
    "invalid.json": b"""{"name": "bad", "epochs": 0, "batch_size": -1,
 "optimizer": {"adam": {"learning_rate": "NaN"}}, "num_workers": 0,
 "unknown_field": 1}""",
}


def idx(magic_type, dims, payload):
    header = bytes([0, 0, magic_type, len(dims)])
    header += b"".join(struct.pack(">I", d) for d in dims)
    return header + payload


def idx_seed(max_samples, images, labels):
    return bytes([max_samples]) + struct.pack("<H", len(images)) + images + labels


def model_file(header_json, floats):
    header = header_json.encode()
    return (b"PSMODEL1" + struct.pack("<I", len(header)) + header +
            struct.pack(f"<{len(floats)}f", *floats))


def main():
    for name, data in JSON_SPECS.items():
        write("fuzz_job_spec_json", name, data)
    write("fuzz_job_spec_binary", "adam-ssp", encode("SubmitJobRequest",
                                                      f"spec {{ {SPEC} }}"))
    write("fuzz_job_spec_binary", "sgd-bsp", encode("SubmitJobRequest",
                                                     f"spec {{ {SPEC_SGD} }}"))
    write("fuzz_job_spec_binary", "empty", b"")
    write("fuzz_job_spec_binary", "wire16", encode("SubmitJobRequest",
                                                    f"spec {{ {SPEC_WIRE16} }}"))
    write("fuzz_job_spec_binary", "external", encode(
        "SubmitJobRequest", f"spec {{ {SPEC_EXTERNAL} }}"))

    requests = [
        (0, "RegisterRequest", 'role: SERVER address: "10.0.0.1:7000"'),
        (0, "RegisterRequest",
         'role: WORKER held { job_id: "job-000001" index: 1 }'),
        (1, "HeartbeatRequest", 'node_id: "worker-7f3a00001"'),
        (2, "ProgressReport",
         'node_id: "worker-1" job_id: "job-000001" worker_index: 1 epoch: 2 '
         'clock: 120 loss: 0.5 samples_per_second: 1000 test_accuracy: 0.8 '
         'total_clocks: 240'),
        (2, "ProgressReport",
         'node_id: "worker-1" job_id: "job-000001" error: "data: missing"'),
        (3, "UploadModelRequest",
         'node_id: "worker-1" model { job_id: "job-000001" model { '
         'kind: SOFTMAX_REGRESSION input_dim: 2 num_classes: 2 } clock: 5 '
         'test_accuracy: 0.5 test_samples: 10 tensors { name: "dense0.weight" '
         'shape: 2 shape: 2 data: "0123456789abcdef" } tensors { '
         'name: "dense0.bias" shape: 2 data: "01234567" } }'),
        (4, "GetJobRequest", 'job_id: "job-000001"'),
        (5, "CancelJobRequest", 'job_id: "job-000002"'),
        (6, "WatchJobRequest", 'job_id: "job-000003"'),
        (7, "ExportModelRequest", 'job_id: "job-000004"'),
        (8, "SubmitJobRequest", f"spec {{ {SPEC} }}"),
        # A Python worker (docs/python.md) and an EXTERNAL model.
        (0, "RegisterRequest",
         'role: WORKER model_digest: "fnv1a64:0123456789abcdef" '
         'job_id: "job-000001"'),
        (8, "SubmitJobRequest", f"spec {{ {SPEC_EXTERNAL} }}"),
    ]
    for i, (kind, message, text) in enumerate(requests):
        write("fuzz_coordinator_requests", f"{i:02d}-{message}",
              bytes([kind]) + encode(message, text))

    rng = random.Random(1)
    for i in range(8):
        write("fuzz_parameter_requests", f"random-{i}",
              bytes(rng.randrange(256) for _ in range(64 << (i % 5))))
        write("fuzz_shard_store_decoder", f"random-{i}",
              bytes(rng.randrange(256) for _ in range(32 << (i % 5))))
    push = encode("PushRequest",
                  'job_id: "job-000001" worker_index: 0 clock: 0 '
                  'map_version: 1 gradients { key: 0 data: "' + "\\000" * 32 +
                  '" } gradients { key: 1 data: "' + "\\000" * 16 + '" } '
                  'gradients { key: 4294967296 data: "' + "\\000" * 12 + '" }')
    pull = encode("PullRequest",
                  'job_id: "job-000001" worker_index: 0 clock: 0 '
                  'map_version: 1 keys: 0 keys: 4294967296')
    # A push and a pull as raw bytes, for the fuzzer to move around.
    write("fuzz_parameter_requests", "raw-push-pull",
          bytes([1, 0, len(push)]) + push + bytes([1, len(pull)]) + pull)
    # The same push with 16-bit gradients (gradient_encoding: FP16).
    push16 = encode("PushRequest",
                    'job_id: "job-000001" worker_index: 0 clock: 0 '
                    'map_version: 1 gradients { key: 0 data: "' +
                    "\\000\\074" * 8 + '" } gradients { key: 1 data: "' +
                    "\\000\\074" * 4 + '" } gradients { key: 4294967296 '
                    'data: "' + "\\000\\074" * 3 + '" } '
                    'gradient_encoding: FP16')
    write("fuzz_parameter_requests", "raw-push16-pull",
          bytes([1, 0, len(push16)]) + push16 + bytes([1, len(pull)]) + pull)
    # An elastic job's push and pull, planned under membership version 1.
    push_m = encode("PushRequest",
                    'job_id: "job-000001" worker_index: 0 clock: 0 '
                    'map_version: 1 gradients { key: 0 data: "' +
                    "\\000" * 32 + '" } membership_version: 1')
    pull_m = encode("PullRequest",
                    'job_id: "job-000001" worker_index: 0 clock: 1 '
                    'map_version: 1 keys: 0 membership_version: 1')
    write("fuzz_parameter_requests", "raw-push-pull-membership",
          bytes([1, 0, len(push_m)]) + push_m + bytes([1, len(pull_m)]) +
          pull_m)
    # A pull reply with bf16 values (value_encoding), as raw bytes, for the
    # in-place reply parser; config 9: the job pulls in FP16.
    reply16 = encode("PullResponse",
                     'blocks { key: 0 data: "' + "\\200\\077" * 8 + '" } '
                     'blocks { key: 4294967296 data: "' + "\\000\\300" * 3 +
                     '" } min_clock: 1 worker_clocks: 1 worker_clocks: 0 '
                     'value_encoding: BF16')
    write("fuzz_parameter_requests", "raw-pull-reply16",
          bytes([9, 1, len(reply16)]) + reply16 + bytes([1, len(pull)]) + pull)

    images = idx(0x08, [2, 2, 2], bytes([0, 255, 128, 7, 1, 2, 3, 4]))
    labels = idx(0x08, [2], bytes([3, 9]))
    write("fuzz_idx_reader", "plain", idx_seed(0, images, labels))
    write("fuzz_idx_reader", "gzip",
          idx_seed(1, gzip.compress(images, mtime=0),
                   gzip.compress(labels, mtime=0)))
    write("fuzz_idx_reader", "truncated", idx_seed(0, images[:-3], labels))
    write("fuzz_idx_reader", "wrong-type",
          idx_seed(2, idx(0x0D, [1, 1, 1], b"\0\0\0\0"), labels))

    # Text data: byte 0 is dim - 1 in bits 0-2 (CSV: bit 7 skips a header).
    write("fuzz_csv_reader", "header", b"\x81label,a,b\n1,0.5,2\n0,3,-1e-3\n")
    write("fuzz_csv_reader", "plain", b"\x011,0.5,2\r\n\n0,3,4")
    write("fuzz_csv_reader", "bad-field", b"\x011,x,2\n")
    write("fuzz_libsvm_reader", "sparse",
          b"\x021 1:0.5 3:2 # c\n0\t2:4\n")
    write("fuzz_libsvm_reader", "last-index", b"\x073 8:1e3\n")
    write("fuzz_libsvm_reader", "decreasing", b"\x021 3:1 1:2\n")

    header = ('{"job_id": "job-000001", "model": {"kind": '
              '"SOFTMAX_REGRESSION", "input_dim": 2, "num_classes": 2}, '
              '"clock": "5", "test_accuracy": 0.5, "test_samples": "10", '
              '"tensors": [{"name": "dense0.weight", "shape": ["2", "2"]}, '
              '{"name": "dense0.bias", "shape": ["2"]}]}\n')
    write("fuzz_model_file", "softmax",
          model_file(header, [0.5, -1.0, 2.0, 0.25, 0.0, 1.0]))
    write("fuzz_model_file", "short", model_file(header, [0.5]))
    write("fuzz_model_file", "magic-only", b"PSMODEL1")

    # PSMODEL2: the dense data, then chunks (u32 table, u32 n, n u64 ids,
    # n * dim float32) and the end marker (u32 0xFFFFFFFF, u32 0, u64 rows).
    tables = ('{"job_id": "job-000002", "model": {"kind": "EXTERNAL", '
              '"tensors": [{"name": "w", "shape": ["2"]}], '
              '"sparse_tables": [{"name": "a", "dim": 2}, '
              '{"name": "b", "dim": 1}]}, '
              '"tensors": [{"name": "w", "shape": ["2"]}]}\n').encode()
    rows = (struct.pack("<II", 0, 2) + struct.pack("<QQ", 5, 1 << 40) +
            struct.pack("<4f", 0.5, -1.0, 2.0, 0.25) +
            struct.pack("<II", 1, 1) + struct.pack("<Q", 3) +
            struct.pack("<f", 7.0))
    end = struct.pack("<IIQ", 0xFFFFFFFF, 0, 3)
    head = b"PSMODEL2" + struct.pack("<I", len(tables)) + tables
    dense = struct.pack("<2f", 1.0, 2.0)
    write("fuzz_model_tables", "two-tables", head + dense + rows + end)
    write("fuzz_model_tables", "no-rows",
          head + dense + struct.pack("<IIQ", 0xFFFFFFFF, 0, 0))


if __name__ == "__main__":
    main()
