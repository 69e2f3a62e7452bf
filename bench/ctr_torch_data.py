"""Criteo display-advertising TSV files as numpy arrays, for bench/ctr_torch.py.

A line: the label (0 or 1), 13 integer features (decimal, '-' allowed) and 26
categorical features (at most 8 hex digits), tab-separated, any of the
features empty when missing; files may be gzip-compressed (.gz). Parsing is
vectorised with numpy (no Python object per cell): the file is read in
blocks of whole lines, the separators are found with one pass over the
bytes, and every cell is read from a right-aligned fixed-width window.

A categorical value v of field f becomes the code (1 << 32) | v, a missing
one 0: the low 33 bits of our cluster's key (f << 33) | (1 << 32) | v.
"""

import gzip
import os

import numpy as np

NUM_DENSE = 13
NUM_FIELDS = 26
NUM_COLUMNS = 1 + NUM_DENSE + NUM_FIELDS
PRESENT_BIT = 1 << 32
BLOCK_BYTES = 8 << 20


def byte_table(chars, values):
    """A 256-entry lookup table: chars[i] -> values[i], anything else 255."""
    table = np.full(256, 255, np.uint8)
    table[np.frombuffer(chars, np.uint8)] = values
    return table


HEX = byte_table(b"0123456789abcdefABCDEF", list(range(16)) + list(range(10, 16)))
DECIMAL = byte_table(b"0123456789-", list(range(10)) + [0])
PAD = 16  # Separators put before a block, so that every window starts in it.


def read_blocks(path, block_bytes=BLOCK_BYTES):
    """The file's bytes (gunzipped when it ends in .gz) in blocks of whole
    lines (a last line without its newline gets one)."""
    opener = gzip.open if path.endswith(".gz") else open
    rest = b""
    with opener(path, "rb") as f:
        while True:
            data = f.read(block_bytes)
            if not data:
                break
            data = rest + data
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if cut:
                yield data[:cut]
    if rest:
        yield rest + b"\n"


def split_cells(block):
    """A block of whole lines -> (bytes as uint8 after PAD separators, the
    offset of the separator after each cell (lines, 40), each cell's length
    (lines, 40))."""
    buf = np.frombuffer(b"\t" * PAD + block.replace(b"\r", b""), np.uint8)
    ends = np.flatnonzero((buf == 9) | (buf == 10))[PAD:]
    lines = len(ends) // NUM_COLUMNS
    newlines = buf[ends] == 10
    if (len(ends) != lines * NUM_COLUMNS or np.count_nonzero(newlines) != lines
            or not newlines[NUM_COLUMNS - 1::NUM_COLUMNS].all()):
        raise ValueError(f"a line does not have {NUM_COLUMNS} tab-separated columns")
    starts = np.empty_like(ends)
    starts[0] = PAD
    starts[1:] = ends[:-1] + 1
    shape = (lines, NUM_COLUMNS)
    return buf, ends.reshape(shape), (ends - starts).reshape(shape)


def windows(buf, ends, lengths, width):
    """The last `width` bytes before each end, (..., width), and the mask of
    those that belong to the cell (cells are right-aligned in them)."""
    rows = np.lib.stride_tricks.as_strided(buf, (len(buf) - width + 1, width), (1, 1))
    position = np.arange(width)
    return rows[ends - width], position >= width - lengths[..., None]


def parse_decimal(buf, ends, lengths):
    """Decimal integer cells ('-' allowed first) -> float64 values, 0 when
    empty. At most 15 characters, so the values are exact."""
    width = max(int(lengths.max()), 1)
    if width > 15:
        raise ValueError("an integer has more than 15 characters")
    cells, mask = windows(buf, ends, lengths, width)
    digits = DECIMAL[cells]
    minus = (cells == ord("-")) & mask
    first = np.arange(width) == width - lengths[..., None]
    if ((digits == 255) & mask).any() or (minus & ~first).any():
        raise ValueError("an integer cell is not a decimal integer")
    digits = np.where(mask, digits, 0).astype(np.float64)
    values = digits @ (10.0 ** np.arange(width - 1, -1, -1))
    return np.where(minus.any(axis=-1), -values, values)


def parse_hex(buf, ends, lengths):
    """Hex cells of at most 8 digits -> int64 codes: 0 when empty, else
    (1 << 32) | value."""
    if lengths.max() > 8:
        raise ValueError("a categorical value is longer than 8 hex digits")
    cells, mask = windows(buf, ends, lengths, 8)
    nibbles = np.where(mask, HEX[cells], 0)
    if (nibbles == 255).any():
        raise ValueError("a categorical value is not hexadecimal")
    packed = np.ascontiguousarray((nibbles[..., 0::2] << 4) | nibbles[..., 1::2])
    values = packed.view(">u4").reshape(lengths.shape).astype(np.int64)
    return np.where(lengths > 0, values | PRESENT_BIT, 0)


def parse_block(block):
    """A block of whole lines -> (labels float32 (n,), dense float32 (n, 13)
    as log(1 + max(x, 0)), codes int64 (n, 26)). Vectorised: no Python
    object per cell."""
    buf, ends, lengths = split_cells(block)
    numbers = parse_decimal(buf, ends[:, :1 + NUM_DENSE], lengths[:, :1 + NUM_DENSE])
    labels = numbers[:, 0]
    if (lengths[:, 0] == 0).any() or not np.isin(labels, (0.0, 1.0)).all():
        raise ValueError("a label is not 0 or 1")
    dense = np.log1p(np.maximum(numbers[:, 1:], 0.0)).astype(np.float32)
    codes = parse_hex(buf, ends[:, 1 + NUM_DENSE:], lengths[:, 1 + NUM_DENSE:])
    return labels.astype(np.float32), dense, codes


def load_criteo(path, max_rows=0):
    """A Criteo-format file as a dict of labels, dense and codes (the first
    max_rows lines when max_rows > 0)."""
    parts, rows = [], 0
    for block in read_blocks(path):
        try:
            labels, dense, codes = parse_block(block)
        except ValueError as e:
            last = rows + block.count(b"\n")
            raise ValueError(f"{path}, lines {rows + 1} to {last}: {e}") from None
        if max_rows > 0 and rows + len(labels) > max_rows:
            keep = max_rows - rows
            labels, dense, codes = labels[:keep], dense[:keep], codes[:keep]
        parts.append((labels, dense, codes))
        rows += len(labels)
        if max_rows > 0 and rows >= max_rows:
            break
    if not parts:
        raise ValueError(f"{path}: no lines")
    return {"labels": np.concatenate([p[0] for p in parts]),
            "dense": np.concatenate([p[1] for p in parts]),
            "codes": np.concatenate([p[2] for p in parts])}


def index_fields(train_codes, test_codes, vocabs=None):
    """Per-field vocabularies of the training codes: (train indices int32,
    test indices int32, rows per table). A test code not in the field's
    vocabulary maps to the table's last row (the unseen row). With a list
    `vocabs`, each field's vocabulary (its sorted codes) is appended to it."""
    train_idx = np.empty(train_codes.shape, np.int32)
    test_idx = np.empty(test_codes.shape, np.int32)
    sizes = []
    for f in range(train_codes.shape[1]):
        vocab, inverse = np.unique(train_codes[:, f], return_inverse=True)
        train_idx[:, f] = inverse
        pos = np.minimum(np.searchsorted(vocab, test_codes[:, f]), len(vocab) - 1)
        test_idx[:, f] = np.where(vocab[pos] == test_codes[:, f], pos, len(vocab))
        sizes.append(len(vocab) + 1)
        if vocabs is not None:
            vocabs.append(vocab)
    return train_idx, test_idx, sizes


def index_unseen(test_codes, test_idx, sizes):
    """The test codes absent from the training vocabularies (those
    index_fields mapped to a table's last row): (unseen int32 like test_idx:
    -1 for a code seen in training, else the code's index in the list
    below; fields int32 and codes int64 of the distinct unseen codes, field
    by field)."""
    unseen = np.full(test_idx.shape, -1, np.int32)
    fields, codes = [], []
    base = 0
    for f in range(test_idx.shape[1]):
        rows = test_idx[:, f] == sizes[f] - 1
        new, inverse = np.unique(test_codes[rows, f], return_inverse=True)
        unseen[rows, f] = base + inverse
        fields.append(np.full(len(new), f, np.int32))
        codes.append(new)
        base += len(new)
    return unseen, np.concatenate(fields), np.concatenate(codes).astype(np.int64)


def save_arrays(directory, name, **arrays):
    """Writes the arrays as NAME.KEY.npy files in directory."""
    for key, value in arrays.items():
        np.save(os.path.join(directory, f"{name}.{key}.npy"), value)


def load_arrays(directory, name, keys):
    """The arrays save_arrays wrote, as a dict."""
    return {k: np.load(os.path.join(directory, f"{name}.{k}.npy")) for k in keys}
