"""The SDK's pure parts against the cluster's C++: the model digest, the
tensors and blocks of built-in models, 16-bit wire gradients, specs, data
partitions."""

import json

import numpy as np
import pytest

import paramserver as ps
from paramserver import layout
from paramserver._cluster import encode_bf16, encode_fp16


def test_digest_matches_the_cpp_one():
    # tests/unit/coordinator/external_model_test.cc asserts the same value.
    assert ps.model_digest([("b", (3,)), ("a", (2, 3))]) == \
        "fnv1a64:22e4aa33711b16a4"
    assert ps.model_digest([("a", (2, 3)), ("b", (3,))]) == \
        "fnv1a64:22e4aa33711b16a4"
    assert ps.model_digest([("a", (3, 2)), ("b", (3,))]) != \
        "fnv1a64:22e4aa33711b16a4"


def test_builtin_tensors_and_blocks():
    spec = ps.to_job_spec({
        "model": {"kind": "CNN", "input_dim": 784, "num_classes": 10,
                  "image": {"height": 28, "width": 28, "channels": 1},
                  "conv_layers": [{"filters": 4, "kernel_size": 3},
                                  {"filters": 8, "kernel_size": 5}],
                  "hidden_layers": [16]}})
    tensors = ps.model_tensors(spec.model)
    assert [(t.name, t.shape) for t in tensors] == [
        ("conv0.weight", (9, 4)), ("conv0.bias", (4,)),
        ("conv1.weight", (100, 8)), ("conv1.bias", (8,)),
        ("dense0.weight", (7 * 7 * 8, 16)), ("dense0.bias", (16,)),
        ("dense1.weight", (16, 10)), ("dense1.bias", (10,))]
    blocks = layout.split_into_blocks(tensors, 256)
    assert blocks[0] == layout.BlockRef(0, 0, 0, 36)
    dense = [b for b in blocks if b.tensor == 4]
    assert [b.numel for b in dense] == [256] * 24 + [128]
    assert dense[-1].key == (4 << 32) | 24
    mlp = ps.to_job_spec({"model": {"kind": "MLP", "input_dim": 784,
                                    "num_classes": 10,
                                    "hidden_layers": [256, 128]}})
    assert [t.shape for t in ps.model_tensors(mlp.model)] == [
        (784, 256), (256,), (256, 128), (128,), (128, 10), (10,)]
    # The derived block size (common/job_spec.cc DeriveBlockElems): the
    # architecture table's 7,424 for this MLP on 2 servers.
    mlp.block_elems = 0
    assert layout.effective_block_elems(mlp, ps.model_tensors(mlp.model),
                                        2) == 7424


def test_ctr_tensors_match_the_cpp_ones():
    # tests/unit/common/ctr_layout_test.cc asserts the same shapes.
    def ctr(interaction, bottom):
        return ps.to_job_spec({"model": {
            "kind": "CTR", "input_dim": 13, "num_classes": 2,
            "sparse_tables": [{"name": f"t{t}", "dim": 4} for t in range(3)],
            "ctr": {"num_fields": 3, "bottom_mlp": bottom, "top_mlp": [8],
                    "interaction": interaction}}}).model
    tensors = ps.model_tensors(ctr("DOT", [8, 4]))
    assert [(t.name, t.shape) for t in tensors] == [
        ("bottom0.weight", (13, 8)), ("bottom0.bias", (8,)),
        ("bottom1.weight", (8, 4)), ("bottom1.bias", (4,)),
        ("top0.weight", (10, 8)), ("top0.bias", (8,)),
        ("top1.weight", (8, 1)), ("top1.bias", (1,))]
    assert ps.model_tensors(ctr("CONCAT", [8, 4]))[4].shape == (16, 8)
    assert [t.shape for t in ps.model_tensors(ctr("CONCAT", []))][0] == (12, 8)
    assert [t.shape for t in ps.model_tensors(ctr("DOT", []))][0] == (3, 8)


def test_sixteen_bit_encodings_round_to_nearest_even_and_saturate():
    x = np.array([0.0, -0.0, 1.0, 1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11,
                  70000.0, -1e30, np.inf, -np.inf, 2 ** -25, 2 ** -24],
                 dtype=np.float32)
    assert encode_fp16(x).tolist() == [
        0x0000, 0x8000, 0x3C00, 0x3C00, 0x3C02, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
        0x0000, 0x0001]
    assert np.isnan(encode_fp16(np.array([np.nan], np.float32)).view(
        np.float16)[0])
    y = np.array([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 3.4e38, np.inf,
                  -2.0], dtype=np.float32)
    assert encode_bf16(y).tolist() == [0x3F80, 0x3F80, 0x3F82, 0x7F7F, 0x7F80,
                                       0xC000]
    assert encode_bf16(np.array([np.nan], np.float32))[0] & 0x7FC0 == 0x7FC0


def test_specs_from_dicts_files_and_messages(tmp_path):
    d = {"name": "x", "epochs": 2, "batchSize": 3,
         "model": {"kind": "EXTERNAL", "tensors": [
             {"name": "w", "shape": [2, 2], "init": "ZEROS"}]}}
    a = ps.to_job_spec(d)
    assert a.batch_size == 3 and a.model.tensors[0].init == ps.v1.ZEROS
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(d))
    assert ps.to_job_spec(str(path)) == a
    assert ps.to_job_spec(path) == a
    assert ps.to_job_spec(a) == a and ps.to_job_spec(a) is not a
    with pytest.raises(ps.InvalidArgumentError) as e:
        ps.to_job_spec({"epochs": 1, "bach_size": 3})
    assert e.value.code.name == "INVALID_ARGUMENT"
    assert "bach_size" in e.value.message
    with pytest.raises(ps.InvalidArgumentError):
        ps.to_job_spec(str(tmp_path / "missing.json"))
    with pytest.raises(TypeError):
        ps.to_job_spec(42)


def test_epoch_order_partitions_and_is_reproducible():
    from paramserver.data import epoch_order
    orders = [epoch_order(103, 4, w, seed=9, epoch=2) for w in range(4)]
    assert all(len(o) == 25 for o in orders)
    assert sorted(np.concatenate(orders).tolist()) == list(range(100))
    assert sorted(orders[1].tolist()) == list(range(25, 50))
    assert (epoch_order(103, 4, 1, 9, 2) == orders[1]).all()
    assert (epoch_order(103, 4, 1, 9, 3) != orders[1]).any()


def test_errors_carry_code_message_and_field():
    e = ps.error_for(ps.InvalidArgumentError.code, "batch_size: must be >= 1")
    assert isinstance(e, ps.InvalidArgumentError) and isinstance(e, ValueError)
    assert e.field == "batch_size"
    assert str(e) == "batch_size: must be >= 1 (INVALID_ARGUMENT)"
    n = ps.error_for(ps.NotFoundError.code, 'job_id: no job "job-000009"')
    assert isinstance(n, ps.NotFoundError) and n.field == "job_id"
    assert ps.error_for(ps.UnavailableError.code,
                        "coordinator at x is not reachable").field is None


def test_worker_refuses_specs_it_cannot_train():
    from paramserver.spec import check_trainable
    base = {"name": "x", "epochs": 1, "batchSize": 8}
    check_trainable(ps.to_job_spec(base))
    check_trainable(ps.to_job_spec({**base, "accumulationSteps": 1}))
    for extra, field in [
            ({"localSgd": {"localSteps": 4}}, "local_sgd.local_steps"),
            ({"dataset": {"labelsPerWorker": 5}},
             "dataset.labels_per_worker"),
            ({"accumulationSteps": 2}, "accumulation_steps"),
            ({"gradientClipping": {"maxGlobalNorm": 1}},
             "gradient_clipping.max_global_norm")]:
        with pytest.raises(ps.InvalidArgumentError) as e:
            check_trainable(ps.to_job_spec({**base, **extra}))
        assert e.value.field == field
        assert "ps-worker" in e.value.message
