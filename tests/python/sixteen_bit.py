"""Shared set-up of the 16-bit wire tests (test_consistency's wire
gradients, test_wire_parameters' wire parameters): values rounded to FP16 or
BF16 as the servers decode them, and one Python worker training
common.Small on a job with a mixed_precision setting."""

import numpy as np
import torch
import torch.nn.functional as F

import paramserver as ps
from paramserver._cluster import encode_bf16, encode_fp16
from workers import common

SAMPLES = 120  # Samples of the job's data; batches of 10, 1 epoch, seed 3.


def roundtrip(values, encoding):
    """Float32 `values` rounded to `encoding` ("FP16" or "BF16") and
    decoded back to float32."""
    if encoding == "FP16":
        return encode_fp16(values).view(np.float16).astype(np.float32)
    return (encode_bf16(values).astype(np.uint32) << 16).view(np.float32)


def train_small(cluster, name, mixed_precision):
    """Starts a cluster of one server and trains common.Small with one
    Python worker on job `name` (SGD 0.5, MEMORY) with `mixed_precision`
    until it succeeds. Returns (coordinator, client, job, reference, x, y):
    reference is a copy of the module's initial values, (x, y) the data."""
    coordinator = cluster.start(servers=1, durable=False)
    torch.manual_seed(0)
    module = common.Small()
    reference = common.Small()
    reference.load_state_dict(module.state_dict())
    x, y = common.synthetic(SAMPLES)
    spec = {"name": name, "model": ps.torch.model_spec(module),
            "epochs": 1, "batch_size": 10, "seed": 3,
            "optimizer": {"sgd": {"learning_rate": 0.5}},
            "mixed_precision": mixed_precision,
            "num_workers": 1, "num_servers": 1, "durability": "MEMORY"}
    client = ps.JobClient(coordinator)
    job = client.submit(spec)
    with ps.torch.Worker(coordinator, module, job=job) as worker:
        for _, batches in worker.epochs((x, y)):
            for xb, yb in batches:
                F.cross_entropy(module(xb), yb).backward()
                worker.step()
    assert client.wait(job, timeout=60).state == ps.v1.SUCCEEDED
    return coordinator, client, job, reference, x, y
