#!/usr/bin/python3
"""Synthetic CTR data in Criteo's display-advertising TSV format, with a
known best achievable AUC (docs/sparse.md, "Data: the Criteo format and the
generator").

  /usr/bin/python3 bench/criteo_gen.py --out DIR [--train_rows N]
      [--test_rows M] [--seed S] [--positive_rate P] [--min_cardinality A]
      [--max_cardinality B | --cardinalities C1,...,C26] [--zipf_s S]
      [--drift F] [--interactions K] [--cat_missing R] [--dense_missing R]
      [--gzip] [--write_test_probabilities]

writes DIR/train.tsv and DIR/test.tsv (.tsv.gz with --gzip): one sample a
line, "label <TAB> I1..I13 <TAB> C1..C26", integers in decimal, categorical
values as 8 lower-case hex digits, any feature empty when missing; and
DIR/teacher.json: the teacher's best test AUC and log loss (from its own
probabilities of the test labels it drew), the positive rates, the distinct
ids per field seen in train, the teacher's parameters and the options. With
--write_test_probabilities, DIR/test_probabilities.txt holds the teacher's
probability of each test row (one a line, as float32 written with 9
significant digits: the exact values teacher.json's figures were computed
from).

The model. Field f (0-based) has a cardinality N_f (log-spaced between the
two bounds). A row draws, per field, a popularity rank r in [0, N_f) from a
bounded power law: r = floor(x) - 1 with x of density proportional to x^-s on
[1, N_f + 1) (inverse CDF; Zipf's law with exponent s, discretized). Drift F
rotates the ranking along the rows (train, then test): the row at position
t in [0, 1) uses slot (r + floor(F * t * N_f)) mod N_f, so later rows' hot
ids are ones earlier rows rarely or never saw. The slot becomes the 32-bit
value by a bijection (an xor with a per-field salt and murmur3's finalizer),
so distinct slots are distinct values. A field's value is missing with a
per-field probability (mean --cat_missing). Dense feature j is
floor(exp(mu_j + sigma_j * normal)) - offset_j (I2's offset makes it
sometimes negative, as Criteo's is), missing with a per-feature probability
(mean --dense_missing).

The label is Bernoulli(sigmoid(logit)), with the hidden teacher's logit
  bias + sum_f w_f(value_f) + sum_j v_j * (log(1 + max(I_j, 0)) - c_j)
       + sum over K field pairs (f, g) of q * <u_f(value_f), u_g(value_g)> / 2
where w_f(value) = scale_f * normal and u_f(value) (4-vectors of normals)
are pure functions of (seed, field, value) through a 64-bit hash (a missing
value has its own weights), so ten million ids need no table; the bias is
calibrated on a pilot sample so that the positive rate is about
--positive_rate.

Timing on the 2-core development VM: docs/benchmarks.md, "CTR data".
"""

import argparse
import gzip
import json
import math
import os
import sys
import time

import numpy as np

NUM_DENSE = 13
NUM_FIELDS = 26
CHUNK_ROWS = 1 << 17  # Rows generated and written at once (fixed: the
# output depends on it through the per-chunk random streams).
PILOT_ROWS = 1 << 17  # Rows the bias is calibrated on.
VECTOR_DIM = 4  # Width of the interaction vectors u_f.
MAX_DENSE = 10**9 - 1  # Dense values are clipped to 9 digits.
MISSING_KEY = 1 << 32  # The hash key of a missing categorical value.

U64 = np.uint64
MASK32 = U64(0xFFFFFFFF)


def mix64(x):
    """splitmix64's finalizer on a uint64 array (wraps mod 2^64)."""
    x = x + U64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
    return x ^ (x >> U64(31))


def key64(*parts):
    """A 64-bit hash of small non-negative integers, as a 1-element array."""
    h = np.zeros(1, dtype=U64)
    for p in parts:
        h = mix64(h ^ U64(p))
    return h


def unit_interval(h):
    """(0, 1] from the top 53 bits of a uint64 array."""
    return ((h >> U64(11)).astype(np.float64) + 1.0) * (1.0 / (1 << 53))


def hashed_normal(keys, salt):
    """A standard normal per uint64 key, a pure function of (salt, key)."""
    h = mix64(keys ^ salt)
    u1 = unit_interval(h)
    u2 = unit_interval(mix64(h + U64(0x632BE59BD9B4E019)))
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)


def slot_to_value(slot, salt32):
    """A bijection of [0, 2^32): xor a salt, then murmur3's fmix32."""
    x = (slot.astype(U64) ^ U64(salt32)) & MASK32
    x = (x ^ (x >> U64(16))) * U64(0x85EBCA6B) & MASK32
    x = (x ^ (x >> U64(13))) * U64(0xC2B2AE35) & MASK32
    return x ^ (x >> U64(16))


def zipf_ranks(rng, n, cardinality, s):
    """n ranks in [0, cardinality), P(r) proportional to the integral of
    x^-s over [r + 1, r + 2) (inverse CDF of the continuous law)."""
    u = rng.random(n)
    top = cardinality + 1.0
    if abs(s - 1.0) < 1e-9:
        x = np.exp(u * math.log(top))
    else:
        a = 1.0 - s
        x = (1.0 + u * (top ** a - 1.0)) ** (1.0 / a)
    r = np.floor(x).astype(np.int64) - 1
    np.clip(r, 0, cardinality - 1, out=r)
    return r


class Teacher:
    """The hidden model and the per-field and per-feature constants, all
    drawn from the seed."""

    def __init__(self, args, cardinalities):
        rng = np.random.default_rng([args.seed, 7])
        # Where the training rows end along the rows (train, then test).
        self.train_fraction = args.train_rows / (args.train_rows +
                                                 args.test_rows)
        self.cardinalities = np.asarray(cardinalities, dtype=np.int64)
        self.zipf_s = args.zipf_s
        self.drift = args.drift
        self.salt = key64(args.seed, 1)
        self.field_salts = [key64(args.seed, 2, f) for f in range(NUM_FIELDS)]
        self.value_salts = [int(key64(args.seed, 3, f)[0] & MASK32)
                            for f in range(NUM_FIELDS)]
        self.field_scales = rng.uniform(0.05, 0.3, NUM_FIELDS)
        self.cat_missing = np.clip(
            rng.uniform(0.0, 2.0, NUM_FIELDS) * args.cat_missing, 0.0, 0.95)
        self.dense_mu = rng.uniform(0.0, 4.0, NUM_DENSE)
        self.dense_sigma = rng.uniform(0.5, 1.5, NUM_DENSE)
        self.dense_offset = np.zeros(NUM_DENSE, dtype=np.int64)
        self.dense_offset[1] = 3  # I2 goes negative, as Criteo's does.
        self.dense_missing = np.clip(
            rng.uniform(0.0, 2.0, NUM_DENSE) * args.dense_missing, 0.0, 0.95)
        self.dense_missing[1] = 0.0  # Criteo's I2 is never missing.
        self.dense_weights = rng.normal(0.0, 0.15, NUM_DENSE)
        self.dense_centers = self.dense_mu.copy()
        pairs = []
        while len(pairs) < args.interactions:
            f, g = sorted(int(v) for v in rng.choice(NUM_FIELDS, 2, False))
            if (f, g) not in pairs:
                pairs.append((f, g))
        self.pairs = pairs
        self.interaction_scale = 0.35
        self.bias = 0.0

    def sample(self, rng, positions):
        """Features and the bias-free logit of rows at `positions` (in
        [0, 1) along train then test): (slots, values, missing, dense,
        dense_missing, logit)."""
        n = len(positions)
        slots = np.empty((n, NUM_FIELDS), dtype=np.int64)
        values = np.empty((n, NUM_FIELDS), dtype=U64)
        missing = np.empty((n, NUM_FIELDS), dtype=bool)
        logit = np.zeros(n)
        keys = []
        for f in range(NUM_FIELDS):
            card = int(self.cardinalities[f])
            rank = zipf_ranks(rng, n, card, self.zipf_s)
            shift = np.floor(self.drift * positions * card).astype(np.int64)
            slots[:, f] = (rank + shift) % card
            values[:, f] = slot_to_value(slots[:, f], self.value_salts[f])
            missing[:, f] = rng.random(n) < self.cat_missing[f]
            key = np.where(missing[:, f], U64(MISSING_KEY), values[:, f])
            keys.append(key)
            logit += self.field_scales[f] * hashed_normal(
                key, self.field_salts[f])
        for f, g in self.pairs:
            dot = np.zeros(n)
            for d in range(VECTOR_DIM):
                uf = hashed_normal(keys[f], self.field_salts[f] + U64(d + 1))
                ug = hashed_normal(keys[g], self.field_salts[g] + U64(d + 1))
                dot += uf * ug
            logit += self.interaction_scale * dot / 2.0
        normal = rng.standard_normal((n, NUM_DENSE))
        dense = np.floor(np.exp(np.minimum(
            self.dense_mu + self.dense_sigma * normal, 21.0)))
        dense = np.minimum(dense, MAX_DENSE).astype(np.int64) - \
            self.dense_offset
        dense_missing = rng.random((n, NUM_DENSE)) < self.dense_missing
        z = np.where(dense_missing, 0.0, np.log1p(np.maximum(dense, 0)))
        logit += ((z - self.dense_centers) * self.dense_weights).sum(axis=1)
        return slots, values, missing, dense, dense_missing, logit

    def calibrate(self, seed, train_rows, target):
        """Sets the bias so that the mean probability over a pilot sample
        spread along the training rows is `target`."""
        rng = np.random.default_rng([seed, 9])
        n = min(PILOT_ROWS, max(train_rows, 1000))
        positions = np.linspace(0.0, self.train_fraction, n, endpoint=False)
        logit = self.sample(rng, positions)[-1]
        lo, hi = -40.0, 40.0
        for _ in range(100):
            mid = (lo + hi) / 2
            if np.mean(1.0 / (1.0 + np.exp(-(logit + mid)))) < target:
                lo = mid
            else:
                hi = mid
        self.bias = (lo + hi) / 2


def format_rows(labels, dense, dense_missing, values, missing):
    """The rows as Criteo TSV bytes: fixed-width cells padded with NUL
    bytes, which are then dropped."""
    n = len(labels)
    int_width = 10  # A sign and up to 9 digits.
    buf = np.zeros((n, 2 + NUM_DENSE * (int_width + 1) + NUM_FIELDS * 9),
                   dtype=np.uint8)
    buf[:, 0] = labels.astype(np.uint8) + ord("0")
    buf[:, 1] = ord("\t")
    cells = np.zeros((n, NUM_DENSE, int_width + 1), dtype=np.uint8)
    cells[:, :, int_width] = ord("\t")
    v = np.abs(dense).astype(np.uint32)
    ndigits = np.ones_like(v)
    for k in range(1, int_width - 1):
        ndigits += (v >= 10 ** k).astype(np.uint32)
    for k in range(int_width - 1):  # Digit k from the right.
        digit = (v % 10).astype(np.uint8) + ord("0")
        cells[:, :, int_width - 1 - k] = np.where(k < ndigits, digit, 0)
        v //= 10
    negative = dense < 0
    rows, cols = np.nonzero(negative)
    cells[rows, cols, int_width - 1 - ndigits[rows, cols]] = ord("-")
    cells[:, :, :int_width][dense_missing] = 0
    buf[:, 2:2 + NUM_DENSE * (int_width + 1)] = cells.reshape(n, -1)
    hexdigits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    cat = np.zeros((n, NUM_FIELDS, 9), dtype=np.uint8)
    for k in range(8):
        nibble = (values >> U64(28 - 4 * k)) & U64(0xF)
        cat[:, :, k] = hexdigits[nibble.astype(np.intp)]
    cat[:, :, :8][missing] = 0
    cat[:, :, 8] = ord("\t")
    cat[:, NUM_FIELDS - 1, 8] = ord("\n")
    buf[:, 2 + NUM_DENSE * (int_width + 1):] = cat.reshape(n, -1)
    flat = buf.ravel()
    return flat[flat != 0].tobytes()


def binary_auc(p, y):
    """Area under the ROC curve, ties counted half (as common/
    binary_metrics.cc computes it); None with one class absent."""
    order = np.argsort(p, kind="stable")
    ps, ys = p[order], y[order].astype(np.int64)
    starts = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]])
    pos = np.add.reduceat(ys, starts).astype(np.float64)
    cnt = np.diff(np.r_[starts, len(ps)]).astype(np.float64)
    neg = cnt - pos
    neg_below = np.cumsum(neg) - neg
    n_pos, n_neg = pos.sum(), neg.sum()
    if n_pos == 0 or n_neg == 0:
        return None  # Undefined (JSON null).
    return float((pos * neg_below + 0.5 * pos * neg).sum() / (n_pos * n_neg))


def binary_log_loss(p, y):
    """Mean log loss, probabilities clipped to [1e-7, 1 - 1e-7]."""
    q = np.clip(p.astype(np.float64), 1e-7, 1.0 - 1e-7)
    return float(-np.mean(np.where(y != 0, np.log(q), np.log1p(-q))))


def write_split(name, teacher, args, first_row, rows, total_rows, seen,
                split_id):
    """Generates and writes one split; returns (probabilities, labels,
    unseen), unseen counting values never seen in train (test only)."""
    path = os.path.join(args.out, name + (".tsv.gz" if args.gzip else ".tsv"))
    out = gzip.open(path, "wb", compresslevel=1) if args.gzip else \
        open(path, "wb")
    probs = np.empty(rows, dtype=np.float32)
    labels = np.empty(rows, dtype=np.int32)
    unseen = np.zeros(NUM_FIELDS, dtype=np.int64)
    with out:
        for c, start in enumerate(range(0, rows, CHUNK_ROWS)):
            n = min(CHUNK_ROWS, rows - start)
            rng = np.random.default_rng([args.seed, split_id, c])
            positions = (first_row + start + np.arange(n)) / total_rows
            slots, values, missing, dense, dmiss, logit = teacher.sample(
                rng, positions)
            p = (1.0 / (1.0 + np.exp(-(logit + teacher.bias)))).astype(
                np.float32)
            y = (rng.random(n) < p).astype(np.int32)
            probs[start:start + n], labels[start:start + n] = p, y
            for f in range(NUM_FIELDS):
                present = slots[~missing[:, f], f]
                if split_id == 0:
                    seen[f][present] = True
                else:
                    unseen[f] += int(np.count_nonzero(~seen[f][present]))
            out.write(format_rows(y, dense, dmiss, values, missing))
    return probs, labels, unseen


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Synthetic Criteo-format CTR data with a known teacher.")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--train_rows", type=int, default=4_000_000)
    p.add_argument("--test_rows", type=int, default=500_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--positive_rate", type=float, default=0.25)
    p.add_argument("--min_cardinality", type=int, default=10)
    p.add_argument("--max_cardinality", type=int, default=10_000_000)
    p.add_argument("--cardinalities", default="",
                   help="26 comma-separated cardinalities (overrides min/max)")
    p.add_argument("--zipf_s", type=float, default=1.05,
                   help="power-law exponent of the ids' popularity")
    p.add_argument("--drift", type=float, default=0.0,
                   help="fraction of each field's ids the popularity "
                        "ranking rotates by from the first row to the last")
    p.add_argument("--interactions", type=int, default=4,
                   help="field pairs with a teacher interaction term")
    p.add_argument("--cat_missing", type=float, default=0.05,
                   help="mean probability that a categorical value is "
                        "missing")
    p.add_argument("--dense_missing", type=float, default=0.1,
                   help="mean probability that a dense value is missing")
    p.add_argument("--gzip", action="store_true",
                   help="write train.tsv.gz and test.tsv.gz (level 1)")
    p.add_argument("--write_test_probabilities", action="store_true",
                   help="write test_probabilities.txt")
    args = p.parse_args(argv)
    if args.cardinalities:
        cards = [int(c) for c in args.cardinalities.split(",")]
        if len(cards) != NUM_FIELDS:
            p.error(f"--cardinalities needs {NUM_FIELDS} values")
    else:
        if not 1 <= args.min_cardinality <= args.max_cardinality:
            p.error("need 1 <= --min_cardinality <= --max_cardinality")
        cards = [int(round(c)) for c in np.geomspace(
            args.min_cardinality, args.max_cardinality, NUM_FIELDS)]
    if not all(1 <= c <= 1 << 32 for c in cards):
        p.error("cardinalities must be in [1, 2^32]")
    if args.train_rows < 1 or args.test_rows < 1:
        p.error("--train_rows and --test_rows must be >= 1")
    if not 0.0 < args.positive_rate < 1.0:
        p.error("--positive_rate must be in (0, 1)")
    if args.zipf_s <= 0.0 or args.drift < 0.0:
        p.error("--zipf_s must be > 0 and --drift >= 0")
    if not 0 <= args.interactions <= NUM_FIELDS * (NUM_FIELDS - 1) // 2:
        p.error("--interactions out of range")
    return args, cards


def main(argv):
    start_time = time.monotonic()
    args, cards = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    teacher = Teacher(args, cards)
    total = args.train_rows + args.test_rows
    teacher.calibrate(args.seed, args.train_rows, args.positive_rate)
    seen = [np.zeros(c, dtype=bool) for c in cards]
    train_p, train_y, _ = write_split("train", teacher, args, 0,
                                      args.train_rows, total, seen, 0)
    test_p, test_y, unseen = write_split("test", teacher, args,
                                         args.train_rows, args.test_rows,
                                         total, seen, 1)
    if args.write_test_probabilities:
        with open(os.path.join(args.out, "test_probabilities.txt"), "w") as f:
            f.write("\n".join(f"{v:.9g}" for v in test_p.tolist()))
            f.write("\n")
    test_rate = float(test_y.mean())
    constant = np.full(len(test_y), np.float32(train_y.mean()))
    report = {
        "format": "criteo-tsv",
        "train_file": "train.tsv.gz" if args.gzip else "train.tsv",
        "test_file": "test.tsv.gz" if args.gzip else "test.tsv",
        "train_rows": args.train_rows,
        "test_rows": args.test_rows,
        "best_test_auc": binary_auc(test_p, test_y),
        "best_test_log_loss": binary_log_loss(test_p, test_y),
        "best_train_auc": binary_auc(train_p, train_y),
        "best_train_log_loss": binary_log_loss(train_p, train_y),
        "constant_test_log_loss": binary_log_loss(constant, test_y),
        "positive_rate": {"target": args.positive_rate,
                          "train": float(train_y.mean()), "test": test_rate},
        "cardinalities": cards,
        "distinct_train_ids": [int(s.sum()) for s in seen],
        "test_values_unseen_in_train": unseen.tolist(),
        "teacher": {
            "bias": teacher.bias,
            "field_scales": teacher.field_scales.tolist(),
            "dense_weights": teacher.dense_weights.tolist(),
            "dense_centers": teacher.dense_centers.tolist(),
            "interaction_pairs": [list(pq) for pq in teacher.pairs],
            "interaction_scale": teacher.interaction_scale,
            "vector_dim": VECTOR_DIM,
            "cat_missing": teacher.cat_missing.tolist(),
            "dense_missing": teacher.dense_missing.tolist(),
        },
        "options": vars(args),
        "seconds": round(time.monotonic() - start_time, 2),
    }
    with open(os.path.join(args.out, "teacher.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(json.dumps({k: report[k] for k in (
        "train_rows", "test_rows", "best_test_auc", "best_test_log_loss",
        "positive_rate", "seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
