"""The PyTorch worker's step pipeline (docs/python.md, "A step's cost"):
pushes and pulls started from the training thread, the next clock's pull in
flight while a batch computes, requests and replies framed once per server
(paramserver._wire), the gradients gathered into one reused buffer, pulls
copied into the parameters in place. What the pipeline trains is exactly
what the sequential path trains, through shared memory or the socket, and a
call that fails is retried through ParameterClient."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import grpc  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import paramserver as ps  # noqa: E402
from paramserver import v1  # noqa: E402
from paramserver._wire import PullDecoder, PushEncoder, varint  # noqa: E402
from workers import common  # noqa: E402

# (key, first value in the flat vector, values): key 0 (not serialized by
# Protobuf), keys of 1 to 10 varint bytes, a one-value block.
BLOCKS = [(0, 0, 5), (1, 5, 300), (1 << 20, 305, 1), (1 << 63, 306, 40)]
SIZE = 346


def test_varint_is_protobufs():
    for value in (1, 127, 128, 300, 1 << 35, (1 << 64) - 1):
        message = v1.SharedPullResponse(length=value).SerializeToString()
        assert message == b"\x08" + varint(value)


@pytest.mark.parametrize("encoding,width", [(v1.FP32, 4), (v1.FP16, 2)])
def test_a_push_is_the_message_the_sdk_builds(encoding, width):
    rng = np.random.default_rng(1)
    wire = rng.integers(0, 256, SIZE * width, dtype=np.uint8)
    encoder = PushEncoder("job-7", 3, 12, encoding, BLOCKS, width)
    region = bytearray(encoder.max_size)
    for clock in (0, 1, 127, 128, 1 << 40):
        expected = v1.PushRequest(job_id="job-7", worker_index=3,
                                  clock=clock, map_version=12,
                                  gradient_encoding=encoding)
        for key, first, n in BLOCKS:
            expected.gradients.add(
                key=key, data=wire[first * width:(first + n) * width]
                .tobytes())
        got = v1.PushRequest.FromString(encoder.encode(wire, clock))
        assert got == expected
        # Into a region whose framing is there from the last step.
        length = encoder.encode_into(region, wire, clock,
                                     template_written=clock > 0)
        assert v1.PushRequest.FromString(bytes(region[:length])) == expected
        wire = np.roll(wire, 1)


def reply(blocks, values, min_clock=4, worker_clocks=(5, 4)):
    r = v1.PullResponse(min_clock=min_clock, worker_clocks=worker_clocks)
    for key, first, n in blocks:
        r.blocks.add(key=key, data=values[first:first + n].astype("<f4")
                     .tobytes())
    return r.SerializeToString()


def test_a_pull_reply_is_read_through_its_framing():
    values = np.random.default_rng(2).standard_normal(SIZE).astype(np.float32)
    values[3] = np.nan
    decoder = PullDecoder(BLOCKS)
    payload = reply(BLOCKS, values) + b"junk past the reply"
    out = np.zeros(SIZE, np.float32)
    rest = decoder.decode(payload, len(payload) - 19, out.view(np.uint8))
    assert rest is not None
    assert rest.min_clock == 4 and list(rest.worker_clocks) == [5, 4]
    assert out.tobytes() == values.tobytes()  # Bit for bit, NaN included.


@pytest.mark.parametrize("blocks", [
    [(0, 0, 5), (2, 5, 300), (1 << 20, 305, 1), (1 << 63, 306, 40)],  # Key.
    BLOCKS[:3],                                    # A block missing.
    BLOCKS + [(9, 346, 1)],                        # One more.
    [(0, 0, 5), (1 << 20, 305, 1), (1, 5, 300), (1 << 63, 306, 40)],  # Order.
])
def test_a_reply_framed_otherwise_is_left_to_the_parser(blocks):
    values = np.ones(SIZE + 1, np.float32)
    payload = reply(blocks, values)
    out = np.zeros(SIZE, np.float32)
    assert PullDecoder(BLOCKS).decode(payload, len(payload),
                                      out.view(np.uint8)) is None
    assert not out.any()  # Nothing written.


def test_a_16_bit_reply_is_left_to_the_parser():
    r = v1.PullResponse()
    for key, first, n in BLOCKS:
        r.blocks.add(key=key, data=b"\0\0" * n)
    payload = r.SerializeToString()
    out = np.zeros(SIZE, np.float32)
    assert PullDecoder(BLOCKS).decode(payload, len(payload),
                                      out.view(np.uint8)) is None


def test_the_flat_gradients_are_the_tensors_gradients_bit_for_bit():
    torch.manual_seed(0)
    module = common.Small()
    params = [p for _, p in ps.torch.parameters_of(module)]
    x, y = common.synthetic(32)
    F.cross_entropy(module(x), y).backward()
    params[-1].grad = None  # A parameter without a gradient pushes zeros.

    class Job:
        pass
    job = Job()
    job.params = params
    job.zero_grads = [None] * len(params)
    job.grad_flat = None

    class Client:
        size = sum(p.numel() for p in params)
    job.client = Client()
    want = torch.cat([torch.zeros(p.numel()) if p.grad is None
                      else p.grad.reshape(-1) for p in params]).numpy()
    first = ps.torch.Worker._gather(None, job)
    assert first.tobytes() == want.tobytes()
    # The same buffer next step, overwritten with the new gradients.
    for p in params:
        p.grad = None if p.grad is None else p.grad * 3
    again = ps.torch.Worker._gather(None, job)
    assert again is first or np.shares_memory(again, first)
    assert again.tobytes() == (want * 3).tobytes()


def train(coordinator, seen, **options):
    """One worker trains the job; `seen` records, per step, whether the
    parameters kept their storage, and the pipeline's counters."""
    torch.manual_seed(0)
    module = common.Small()
    data = common.synthetic(512)
    storage = [p.data_ptr() for p in module.parameters()]
    # The pure-Python pipeline (test_native_transport.py: the compiled one).
    options.setdefault("native", False)
    with ps.torch.Worker(coordinator, module, **options) as worker:
        for _, batches in worker.epochs(data):
            for xb, yb in batches:
                F.cross_entropy(module(xb), yb).backward()
                worker.step()
                if "hook" in seen and worker._job.pipe is not None:
                    seen.pop("hook")(worker._job)
            seen["in_place"] = storage == [p.data_ptr()
                                           for p in module.parameters()]
            pipe = worker._job.pipe
            if pipe is not None:
                seen["fast"] = pipe.fast_replies
                seen["parsed"] = pipe.parsed_replies
                client = worker._job.client
                seen["shared"] = [client.uses_shared_memory(s)
                                  for s in range(len(client.addresses))]


def run_job(cluster, seen, consistency=None, **options):
    spec = {"name": "pipe", "model": ps.torch.model_spec(common.Small()),
            "epochs": 2, "batch_size": 16, "seed": 1, "block_elems": 64,
            "optimizer": {"adam": {"learning_rate": 0.01}},
            "consistency": consistency or {"model": "BSP"}, "num_workers": 1,
            "num_servers": 2, "durability": "MEMORY"}
    with ps.JobClient(cluster.coordinator) as client:
        job = client.submit(spec)
        train(cluster.coordinator, seen, **options)
        final = client.wait(job, timeout=60)
        assert final.state == ps.v1.SUCCEEDED, final.message
        return client.export(job)


def assert_same(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name


def test_the_pipeline_trains_what_the_sequential_path_trains(cluster):
    cluster.start(servers=2, durable=False)
    sequential = run_job(cluster, {}, pipeline=False)
    seen = {}
    assert_same(run_job(cluster, seen), sequential)
    # Shared memory to both servers, every reply read through its framing
    # (the servers frame replies as the SDK expects), parameters written in
    # place.
    assert seen["shared"] == [True, True]
    assert seen["fast"] > 0 and seen["parsed"] == 0
    assert seen["in_place"]
    seen = {}
    assert_same(run_job(cluster, seen, shared_memory_payloads=False),
                sequential)
    assert seen["shared"] == [False, False] and seen["fast"] > 0


def test_a_server_refusing_shared_memory_is_called_through_the_socket(
        cluster):
    cluster.start_coordinator()
    cluster.start_server(durable=False)
    cluster.start_server(durable=False,
                         extra=["--shared_memory_payloads=false"])
    seen = {}
    pipelined = run_job(cluster, seen)
    assert sorted(seen["shared"]) == [False, True]
    assert_same(pipelined, run_job(cluster, {}, pipeline=False))


def test_a_failed_call_is_made_again_through_the_parameter_client(cluster):
    cluster.start(servers=2, durable=False)
    calls = []

    def break_one_push_and_one_pull(job):
        # The next push to server 1 and pull from server 0 fail UNAVAILABLE
        # once (a call to an address where nothing listens).
        pipe = job.pipe
        dead = grpc.insecure_channel("127.0.0.1:1")  # Nothing listens.
        for table, s in ((pipe._push_shared, 1), (pipe._push, 1),
                         (pipe._pull_shared, 0), (pipe._pull, 0)):
            good = table[s]

            class Once:
                def future(self, *a, table=table, s=s, good=good, **k):
                    table[s] = good
                    calls.append(s)
                    return dead.unary_unary("/ps.v1.ParameterService/Pull"
                                            ).future(b"", timeout=5)
            table[s] = Once()
    seen = {"hook": break_one_push_and_one_pull}
    broken = run_job(cluster, seen)
    assert calls  # The broken calls were made, and retried.
    assert_same(broken, run_job(cluster, {}, pipeline=False))


@pytest.mark.parametrize("consistency", [
    {"model": "SSP", "staleness": 1}, {"model": "ASP"}])
def test_ssp_and_asp_train_with_the_pipeline(cluster, consistency):
    # The next clock's pull is made while the last push may be in flight:
    # the servers take a read two clocks beyond the worker's recorded
    # pushes (docs/consistency.md, "The worker's pipeline").
    cluster.start(servers=2, durable=False)
    seen = {}
    exported = run_job(cluster, seen, consistency=consistency)
    assert seen["fast"] > 0
    assert all(np.isfinite(v).all() for v in exported.values())
