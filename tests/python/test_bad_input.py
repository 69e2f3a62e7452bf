"""Bad input from Python workers: a module that does not match the job, a
push of the wrong shape, NaN gradients. Each gives a clear error and changes
nothing: the job is not taken, or its parameters are those of the good
steps only (checked against a local torch.optim.SGD on the same batches)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import paramserver as ps  # noqa: E402
from paramserver.data import epoch_order  # noqa: E402
from workers import common  # noqa: E402

LR = 0.1


def small_spec(module, **extra):
    spec = {"name": "bad-input", "model": ps.torch.model_spec(module),
            "epochs": 1, "batch_size": 10, "seed": 2,
            "optimizer": {"sgd": {"learning_rate": LR}},
            "num_workers": 1, "num_servers": 2, "durability": "MEMORY",
            "block_elems": 32}
    spec.update(extra)
    return spec


def flat(module):
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()]
                     ).numpy().copy()


def test_a_module_that_does_not_match_the_job(cluster):
    coordinator = cluster.start(servers=2, durable=False)
    torch.manual_seed(0)
    right = common.Small(hidden=16)
    client = ps.JobClient(coordinator)
    job = client.submit(small_spec(right))
    wrong = common.Small(hidden=17)
    # A worker for this job is refused at once, saying which tensors differ.
    with ps.torch.Worker(coordinator, wrong, job=job) as worker:
        with pytest.raises(ps.ModelMismatchError) as e:
            worker.wait_for_job(timeout=30)
    message = e.value.message
    assert e.value.code.name == "INVALID_ARGUMENT"
    assert e.value.field == "model_digest"
    assert "fc1.weight is [16, 12] in the job, [17, 12] in the module" in message
    assert "fc2.weight is [4, 16] in the job, [4, 17] in the module" in message
    # A worker for any job is not given this one.
    with ps.torch.Worker(coordinator, wrong) as worker:
        with pytest.raises(ps.DeadlineExceededError) as e:
            worker.wait_for_job(timeout=1.5)
        assert worker.digest in e.value.message
    status = client.get(job)
    assert status.state == ps.v1.PENDING
    assert "1 Python worker with model" in status.message
    # A float64 module cannot be a worker at all.
    with pytest.raises(ps.ModelMismatchError) as e:
        ps.torch.Worker(coordinator, common.Small().double())
    assert "float64" in e.value.message
    # The job is unharmed: a matching worker trains it.
    x, y = common.synthetic(200)
    with ps.torch.Worker(coordinator, right, job=job) as worker:
        for _, batches in worker.epochs((x, y)):
            for xb, yb in batches:
                F.cross_entropy(right(xb), yb).backward()
                worker.step()
    assert client.wait(job, timeout=60).state == ps.v1.SUCCEEDED
    client.close()


def raw_pull(stub, job, clock, size_of):
    reply = stub.Pull(ps.v1.PullRequest(job_id=job, worker_index=0,
                                        clock=clock, map_version=1),
                      timeout=10)
    return {b.key: np.frombuffer(b.data, "<f4").copy() for b in reply.blocks}


def test_wrong_shape_pushes_and_nan_gradients_change_nothing(cluster):
    coordinator = cluster.start(servers=2, durable=False)
    torch.manual_seed(0)
    module = common.Small()
    reference = common.Small()
    reference.load_state_dict(module.state_dict())
    sgd = torch.optim.SGD(reference.parameters(), lr=LR)
    samples = 200
    x, y = common.synthetic(samples)
    client = ps.JobClient(coordinator)
    job = client.submit(small_spec(module))
    order = epoch_order(samples, 1, 0, 2, 0)
    nan_error = None
    with ps.torch.Worker(coordinator, module, job=job) as worker:
        for _, batches in worker.epochs((x, y)):
            for k, (xb, yb) in enumerate(batches):
                if k == 3:
                    # A NaN gradient: refused before anything is sent.
                    before = flat(module)
                    (F.cross_entropy(module(xb), yb) * float("nan")).backward()
                    with pytest.raises(ps.NonFiniteGradientError) as e:
                        worker.step()
                    nan_error = e.value
                    assert worker.clock == 3
                    worker.sync()
                    assert np.array_equal(flat(module), before)
                    for p in module.parameters():
                        p.grad = None
                if k == 5:
                    # A push of the wrong shape, straight to a server: refused
                    # with INVALID_ARGUMENT naming the block, nothing applied.
                    status = client.get(job)
                    address = status.shard_map.servers[0]
                    key = next(b.key for b in status.shard_map.blocks
                               if b.server == 0)
                    import grpc
                    channel = grpc.insecure_channel(address)
                    stub = ps.v1.ParameterServiceStub(channel)
                    before = raw_pull(stub, job, worker.clock, None)
                    bad = ps.v1.PushRequest(job_id=job, worker_index=0,
                                            clock=worker.clock, map_version=1)
                    bad.gradients.add(key=key, data=b"\0" * 12)
                    with pytest.raises(grpc.RpcError) as e:
                        stub.Push(bad, timeout=10)
                    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                    assert f"gradients: block {key} has 12 bytes" in \
                        e.value.details()
                    after = raw_pull(stub, job, worker.clock, None)
                    assert before.keys() == after.keys()
                    assert all(np.array_equal(before[k], after[k])
                               for k in before)
                    channel.close()
                    # And through the SDK: refused locally, naming the shape.
                    with pytest.raises(ps.InvalidArgumentError) as e:
                        worker._job.client.push(worker.clock,
                                                np.zeros(7, np.float32))
                    assert e.value.field == "gradients"
                loss = F.cross_entropy(module(xb), yb)
                loss.backward()
                worker.step(loss)
                # The reference takes the same good steps.
                idx = order[k * 10:(k + 1) * 10]
                sgd.zero_grad()
                F.cross_entropy(reference(x[idx]), y[idx]).backward()
                sgd.step()
    assert nan_error is not None
    assert nan_error.tensor == "fc1.weight"
    assert "fc1.weight holds NaN or Inf at clock 3" in nan_error.message
    final = client.wait(job, timeout=60)
    assert final.state == ps.v1.SUCCEEDED, final.message
    exported = client.export(job)
    for name, p in reference.named_parameters():
        np.testing.assert_allclose(exported[name], p.detach().numpy(),
                                   atol=1e-5)
    client.close()


def test_nan_gradients_are_dropped_when_the_job_says_so(cluster):
    coordinator = cluster.start(servers=1, durable=False)
    torch.manual_seed(0)
    module = common.Small()
    x, y = common.synthetic(40)
    client = ps.JobClient(coordinator)
    job = client.submit(small_spec(module, num_servers=1,
                                   non_finite_gradients="NON_FINITE_DROP"))
    with ps.torch.Worker(coordinator, module, job=job) as worker:
        for _, batches in worker.epochs((x, y)):
            for k, (xb, yb) in enumerate(batches):
                before = flat(module)
                loss = F.cross_entropy(module(xb), yb)
                (loss * float("nan") if k == 1 else loss).backward()
                worker.step()
                worker.sync()
                if k == 1:  # Acknowledged, the clock advanced, nothing applied.
                    assert worker.clock == 2
                    assert np.array_equal(flat(module), before)
                else:
                    assert not np.array_equal(flat(module), before)
    assert client.wait(job, timeout=60).state == ps.v1.SUCCEEDED
    client.close()
