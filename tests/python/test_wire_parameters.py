"""16-bit parameters on the pull wire (mixed_precision.wire_parameters): a
Python worker computes on the values rounded to FP16 or BF16, as the servers
send them, while the servers keep and apply to float32 values."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from paramserver._cluster import (decode_values, encode_bf16,  # noqa: E402
                                  encode_fp16)
from paramserver.data import epoch_order  # noqa: E402
import sixteen_bit  # noqa: E402


def test_decode_values_is_exact():
    values = np.array([1.0 + 2.0 ** -20, 1e6, -3e-8, 0.1, -0.75, np.inf],
                      dtype=np.float32)
    for code, name in ((1, "FP16"), (2, "BF16")):
        bits = (encode_fp16 if name == "FP16" else encode_bf16)(values)
        np.testing.assert_array_equal(
            decode_values(bits.astype("<u2").tobytes(), code),
            sixteen_bit.roundtrip(values, name))
    np.testing.assert_array_equal(
        decode_values(values.astype("<f4").tobytes(), 0), values)
    with pytest.raises(ValueError):
        decode_values(b"\0\0", 7)


@pytest.mark.parametrize("encoding", ["FP16", "BF16"])
def test_sixteen_bit_wire_parameters(cluster, encoding):
    _, client, job, reference, x, y = sixteen_bit.train_small(
        cluster, "wire-params", {"wire_parameters": encoding})
    samples = sixteen_bit.SAMPLES
    # The reference: float32 master values; each step's gradient is taken
    # at the master values rounded to the format and applied to the master
    # values, as the servers do.
    master = {n: p.detach().numpy().copy()
              for n, p in reference.named_parameters()}
    order = epoch_order(samples, 1, 0, 3, 0)
    for k in range(samples // 10):
        idx = order[k * 10:(k + 1) * 10]
        with torch.no_grad():
            for n, p in reference.named_parameters():
                p.copy_(torch.from_numpy(
                    sixteen_bit.roundtrip(master[n].reshape(-1), encoding)
                ).reshape(p.shape))
        reference.zero_grad()
        F.cross_entropy(reference(x[idx]), y[idx]).backward()
        for n, p in reference.named_parameters():
            master[n] -= np.float32(0.5) * p.grad.numpy()
    # Float32, unrounded; gradients taken at unrounded values would be off by
    # far more than the tolerance.
    exported = client.export(job)
    for name, values in master.items():
        np.testing.assert_allclose(exported[name], values, atol=2e-6)
    client.close()
