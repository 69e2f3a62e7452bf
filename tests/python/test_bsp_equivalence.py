"""BSP with two PyTorch workers of batch b equals one PyTorch process with
batch 2b on the same samples (tests/integration/bsp_equivalence_test.cc is
the C++ workers' counterpart).

Two paramserver.torch.Workers (each a full cluster member, on its own
thread) train an EXTERNAL model under BSP on two servers, the initial values
seeded from worker 0's module. The reference is one module with a
torch.optim optimizer, whose batch k is worker 0's batch k followed by
worker 1's (paramserver.data.epoch_order). Every step's parameters (as
worker 0 reads them before its batch) and the final model (worker 0's final
read, and the exported one) must match.

Tolerance: 1e-5 absolute. The two computations differ only in float32
rounding: the servers average the two workers' mean gradients ((g0 + g1) / 2
over b samples each) where torch takes the mean over 2b samples, and apply
the update with their own kernels (server/optimizer.cc) rather than torch's;
each is within a few ulps (about 1e-7 for values of order 1) per step, and
25 steps of SGD or Adam at these rates keep the sum far below 1e-5 while the
parameters themselves move by more than 1e-2 (asserted, so the comparison is
not vacuous). Measured: see the printed max difference.
"""

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import paramserver as ps  # noqa: E402
from paramserver.data import epoch_order  # noqa: E402

TOLERANCE = 1e-5
SAMPLES, FEATURES, CLASSES = 400, 12, 4
BATCH = 8
SEED = 11


def make_module():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, CLASSES))


def make_data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    y = (x[:, :CLASSES] * torch.arange(1, CLASSES + 1)).argmax(1)
    return x, y


def flat(module):
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()]
                     ).numpy().copy()


OPTIMIZERS = {
    "sgd_momentum": ({"sgd": {"learning_rate": 0.2, "momentum": 0.9,
                              "weight_decay": 0.001}},
                     lambda p: torch.optim.SGD(p, lr=0.2, momentum=0.9,
                                               weight_decay=0.001)),
    "adam": ({"adam": {"learning_rate": 0.01}},
             lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.9, 0.999),
                                        eps=1e-8)),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_bsp_two_workers_equal_one_process_with_twice_the_batch(cluster,
                                                                name):
    optimizer_spec, make_optimizer = OPTIMIZERS[name]
    coordinator = cluster.start(servers=2, durable=False)
    x, y = make_data()
    spec = {"name": f"bsp-{name}", "model": ps.torch.model_spec(make_module()),
            "epochs": 1, "batch_size": BATCH, "seed": SEED,
            "optimizer": optimizer_spec, "consistency": {"model": "BSP"},
            "num_workers": 2, "num_servers": 2, "durability": "MEMORY",
            # Small blocks, so that every tensor spans both servers.
            "block_elems": 64}
    client = ps.JobClient(coordinator)
    job = client.submit(spec)

    trajectories = {}
    errors = []

    def train(module):
        try:
            with ps.torch.Worker(coordinator, module, job=job) as worker:
                seen = []
                for epoch, batches in worker.epochs((x, y)):
                    for xb, yb in batches:
                        seen.append(flat(module))
                        loss = F.cross_entropy(module(xb), yb)
                        loss.backward()
                        worker.step(loss)
                    worker.report()
                seen.append(flat(module))  # Worker 0: the final read.
                trajectories[worker.index] = seen
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
            raise

    # Built here, not in the threads: make_module seeds torch's global
    # generator, and two threads drawing from it at once would interleave
    # their draws and give worker 0 other initial values than the reference.
    modules = [make_module() for _ in range(2)]
    threads = [threading.Thread(target=train, args=(m,)) for m in modules]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    final = client.wait(job, timeout=60)
    assert final.state == ps.v1.SUCCEEDED, final.message

    # The reference: one process, batch 2b = worker 0's batch, then worker 1's.
    reference = make_module()
    optimizer = make_optimizer(reference.parameters())
    order0 = epoch_order(SAMPLES, 2, 0, SEED, 0)
    order1 = epoch_order(SAMPLES, 2, 1, SEED, 0)
    steps = (SAMPLES // 2) // BATCH
    expected = []
    for k in range(steps):
        expected.append(flat(reference))
        idx = np.concatenate([order0[k * BATCH:(k + 1) * BATCH],
                              order1[k * BATCH:(k + 1) * BATCH]])
        optimizer.zero_grad()
        F.cross_entropy(reference(x[idx]), y[idx]).backward()
        optimizer.step()
    expected.append(flat(reference))

    got = trajectories[0]
    assert len(got) == steps + 1 == 26
    diff = max(np.abs(a - b).max() for a, b in zip(got, expected))
    moved = np.abs(expected[-1] - expected[0]).max()
    print(f"{name}: max difference over {steps} steps {diff:.3g}, "
          f"parameters moved by up to {moved:.3g}")
    assert moved > 1e-2
    assert diff <= TOLERANCE
    # Worker 1 read the same parameters before every batch.
    assert max(np.abs(a - b).max() for a, b in
               zip(trajectories[1][:-1], got[:-1])) == 0
    # The exported model is worker 0's final read.
    exported = client.export(job)
    values = np.concatenate([exported[n].reshape(-1) for n, _ in
                             make_module().named_parameters()])
    assert np.array_equal(values, got[-1])
    client.close()
