#!/usr/bin/python3
"""Writes a Criteo-format file whose id space is COPIES times the input's,
with the same rows per batch (bench/ctr_table_scaling.sh): line i belongs to
segment s = i // SEGMENT_LINES, and in segments s > 0 every categorical value
v of field f becomes v XOR K(s, f), K a 32-bit constant per (segment, field).
Within a segment the map is a bijection per field, so a batch drawn from one
segment touches exactly as many distinct ids as the input's batch at that
place; across segments the values are (almost surely) disjoint, so the
tables grow with the segments. Labels and dense features are copied.

  bench/ctr_relabel.py IN.tsv OUT.tsv --segment_lines 131072 [--copies 10]

With --copies C, segment s uses copy s % C (copy 0: the input's ids)."""
import argparse
import hashlib


def key(copy, field):
    digest = hashlib.blake2b(f"{copy}:{field}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--segment_lines", type=int, required=True)
    p.add_argument("--copies", type=int, default=10)
    args = p.parse_args()
    keys = [[key(c, f) for f in range(26)] for c in range(args.copies)]
    with open(args.input) as src, open(args.output, "w") as out:
        for i, line in enumerate(src):
            copy = (i // args.segment_lines) % args.copies
            if copy == 0:
                out.write(line)
                continue
            cols = line.rstrip("\n").split("\t")
            k = keys[copy]
            for f in range(26):
                v = cols[14 + f]
                if v:
                    cols[14 + f] = "%08x" % (int(v, 16) ^ k[f])
            out.write("\t".join(cols) + "\n")


if __name__ == "__main__":
    main()
