"""paramserver.model_file (docs/model-format.md): PSMODEL1 and PSMODEL2
files read into NumPy, damaged files refused, and the rows loaded into a
torch module whose EmbeddingBag and Linear then compute what the file's
values say. The files are written here byte by byte as the document lays
them out (the C++ writer's own layout test checks the same bytes)."""
import json
import struct

import numpy as np
import pytest

import paramserver.model_file as mf


def header(tables):
    return {
        "job_id": "job-000003",
        "model": {"kind": "EXTERNAL",
                  "tensors": [{"name": "fc.weight", "shape": ["1", "2"]},
                              {"name": "fc.bias", "shape": ["1"]}],
                  "sparse_tables": [{"name": n, "dim": d}
                                    for n, d in tables]},
        "clock": "12",
        "tensors": [{"name": "fc.weight", "shape": ["1", "2"]},
                    {"name": "fc.bias", "shape": ["1"]}],
    }


def write(path, tables, chunks, magic=b"PSMODEL2", end_rows=None):
    text = (json.dumps(header(tables), indent=1) + "\n").encode()
    out = magic + struct.pack("<I", len(text)) + text
    out += struct.pack("<3f", 0.5, -2.0, 0.25)
    total = 0
    for table, ids, rows in chunks:
        out += struct.pack("<II", table, len(ids))
        out += np.asarray(ids, "<u8").tobytes()
        out += np.asarray(rows, "<f4").tobytes()
        total += len(ids)
    if magic == b"PSMODEL2":
        out += struct.pack("<IIQ", 0xFFFFFFFF, 0,
                           total if end_rows is None else end_rows)
    path.write_bytes(out)
    return path


CHUNKS = [(0, [1 << 40, 3], [[1.0, 2.0], [3.0, 4.0]]),
          (1, [9], [[5.0, 6.0, 7.0]]),
          (0, [17], [[-1.0, -2.0]])]


def test_reads_tensors_and_tables(tmp_path):
    path = write(tmp_path / "m.bin", [("emb", 2), ("other", 3)], CHUNKS)
    model = mf.read_model(str(path))
    assert model.header["clock"] == "12"
    np.testing.assert_array_equal(model.tensors["fc.weight"], [[0.5, -2.0]])
    ids, rows = model.tables["emb"]
    assert ids.dtype == np.uint64 and rows.dtype == np.float32
    np.testing.assert_array_equal(ids, [1 << 40, 3, 17])
    np.testing.assert_array_equal(rows, [[1, 2], [3, 4], [-1, -2]])
    ids, rows = model.tables["other"]
    assert rows.shape == (1, 3)
    chunks = list(mf.iter_table_chunks(str(path)))
    assert [c[0] for c in chunks] == ["emb", "other", "emb"]


def test_dense_only_files_have_no_tables(tmp_path):
    path = write(tmp_path / "m.bin", [], [], magic=b"PSMODEL1")
    model = mf.read_model(str(path))
    assert model.tables == {}
    assert model.tensors["fc.bias"].tolist() == [0.25]


@pytest.mark.parametrize("damage", ["magic", "count", "table", "tail"])
def test_damaged_files_are_refused(tmp_path, damage):
    tables = [("emb", 2), ("other", 3)]
    if damage == "count":
        path = write(tmp_path / "m.bin", tables, CHUNKS, end_rows=7)
    elif damage == "table":
        path = write(tmp_path / "m.bin", tables, [(4, [1], [[1, 2]])])
    else:
        path = write(tmp_path / "m.bin", tables, CHUNKS)
        data = path.read_bytes()
        path.write_bytes(b"PSMODEL9" + data[8:] if damage == "magic"
                         else data + b"\0")
    with pytest.raises(mf.ModelFileError):
        mf.read_model(str(path))


def test_loads_into_embedding_bag_and_linear(tmp_path):
    torch = pytest.importorskip("torch")
    path = write(tmp_path / "m.bin", [("emb", 2), ("other", 3)], CHUNKS)
    model = mf.read_model(str(path))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.EmbeddingBag(4, 2, mode="sum")
            self.side = torch.nn.Embedding(1, 3)
            self.fc = torch.nn.Linear(2, 1)

        def forward(self, index):
            return self.fc(self.emb(index))

    net = Net()
    index = mf.load_into_module(net, model, tables={"other": "side"})
    ids = torch.tensor([[3, 17], [1 << 40, 12345]], dtype=torch.int64)
    rows = index["emb"](ids)
    # 3 and 17 are rows 0 and 1 (ids ascending), 2^40 row 2, the unknown
    # 12345 the zero row 3.
    assert rows.tolist() == [[0, 1], [2, 3]]
    with torch.no_grad():
        out = net(rows)
    # [3,4] + [-1,-2] = [2, 2]; [1, 2] + 0 = [1, 2]; w = [0.5, -2], b 0.25.
    assert out.flatten().tolist() == [2 * 0.5 - 2 * 2 + 0.25,
                                      1 * 0.5 - 2 * 2 + 0.25]
    assert net.side.weight.tolist() == [[5, 6, 7], [0, 0, 0]]
    with pytest.raises(KeyError):
        mf.load_into_module(Net(), model)  # "other" has no submodule.


# --- Through the real executables: psctl export of a CTR job, read here. ---

def ctr_spec(data, servers, name="ctr", bad_table=None):
    tables = [{"name": f"C{f + 1}", "dim": 4,
               "optimizer": {"rowwise_adagrad": {"learning_rate": 0.1}}}
              for f in range(26)]
    if bad_table is not None:
        tables[bad_table]["name"] = "X"
    return {"name": name,
            "model": {"kind": "CTR", "input_dim": 13, "num_classes": 2,
                      "sparse_tables": tables,
                      "ctr": {"num_fields": 26, "bottom_mlp": [8, 4],
                              "top_mlp": [8]}},
            "dataset": {"format": "CRITEO",
                        "train_file": str(data / "train.tsv"),
                        "test_file": str(data / "test.tsv")},
            "epochs": 1, "batch_size": 64, "seed": 3,
            "optimizer": {"adagrad": {"learning_rate": 0.05}},
            "consistency": {"model": "BSP"},
            "num_workers": 2, "num_servers": servers, "durability": "WAL"}


def psctl(coordinator, *args):
    import subprocess
    from cluster import binary
    return subprocess.run([binary("client", "psctl"),
                           f"--coordinator={coordinator}", *args],
                          capture_output=True, text=True, timeout=120)


def test_reads_a_psctl_export_and_starts_a_job_from_it(cluster, tmp_path):
    import os
    import subprocess
    import paramserver as ps
    from cluster import binary
    if not os.access(binary("worker", "ps-worker"), os.X_OK):
        pytest.skip("ps-worker is not built")
    source = os.environ.get("PS_SOURCE_DIR", os.path.join(
        os.path.dirname(__file__), "..", ".."))
    data = tmp_path / "data"
    subprocess.run(["/usr/bin/python3",
                    os.path.join(source, "bench", "criteo_gen.py"),
                    "--out", str(data), "--train_rows", "4096",
                    "--test_rows", "512", "--seed", "2",
                    "--min_cardinality", "3", "--max_cardinality", "200"],
                   check=True, capture_output=True, timeout=120)
    coordinator = cluster.start(servers=2, cpp_workers=2)
    with ps.JobClient(coordinator, timeout=10) as client:
        job = client.wait(client.submit(ctr_spec(data, 2)), timeout=240)
        assert job.state == ps.v1.SUCCEEDED, job.message
        path = tmp_path / "model.bin"
        out = psctl(coordinator, "export", job.job_id, f"--output={path}")
        assert out.returncode == 0, out.stderr
        assert "sparse rows" in out.stdout

        model = mf.read_model(str(path))
        assert path.read_bytes()[:8] == b"PSMODEL2"
        assert model.header["job_id"] == job.job_id
        assert len(model.tables) == 26
        assert np.float32(model.header["test_auc"]) == \
            np.float32(job.progress.test_auc)
        for name, (ids, rows) in model.tables.items():
            assert rows.shape == (len(ids), 4)
            assert len(np.unique(ids)) == len(ids), name
            assert np.isfinite(rows).all()
        # Field 0 holds 3 values (and maybe a missing one): each trained.
        assert 1 <= len(model.tables["C1"][0]) <= 4
        dense = tmp_path / "dense.bin"
        out = psctl(coordinator, "export", job.job_id, f"--output={dense}",
                    "--dense_only")
        assert out.returncode == 0, out.stderr
        assert dense.read_bytes()[:8] == b"PSMODEL1"
        assert mf.read_model(str(dense)).tables == {}

        # A file that does not fit the spec is refused before it is sent.
        spec_path = tmp_path / "bad.json"
        spec_path.write_text(json.dumps(ctr_spec(data, 3, bad_table=4)))
        out = psctl(coordinator, "submit", str(spec_path),
                    f"--init_from={path}")
        assert out.returncode == 1
        assert "init_from: table 4 is C5 of dim 4 in the model file" in \
            out.stderr

        # On three servers: every server loads its buckets' rows.
        cluster.start_server()
        spec_path = tmp_path / "restart.json"
        spec_path.write_text(json.dumps(ctr_spec(data, 3, name="again")))
        out = psctl(coordinator, "submit", str(spec_path),
                    f"--init_from={path}")
        assert out.returncode == 0, out.stderr
        new_id = out.stdout.split()[-1]
        again = client.wait(new_id, timeout=240)
        assert again.state == ps.v1.SUCCEEDED, again.message
        assert again.spec.init_from == str(path)
    loaded = [cluster.process(f"server{i}").output().count(
        f"initial values from {path}") for i in range(3)]
    assert loaded == [1, 1, 1]
