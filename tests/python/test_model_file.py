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
