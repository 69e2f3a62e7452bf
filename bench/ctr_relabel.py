#!/usr/bin/python3
"""Writes a Criteo-format file of SEGMENTS segments of SEGMENT_LINES lines
each, segment s the input's segment s % SOURCE_SEGMENTS with its ids moved to
copy s % COPIES of the id space (bench/ctr_table_scaling.sh): every
categorical value v of field f becomes v XOR K(c, f) in copy c > 0, K a
32-bit constant per (copy, field); copy 0 keeps the input's ids. Within a
segment the map is a bijection per field, so a batch drawn from one segment
touches exactly as many distinct ids as the same batch of another copy;
across copies the values are (almost surely) disjoint, so the tables grow
with the copies. Labels and dense features are copied.

  bench/ctr_relabel.py IN.tsv OUT.tsv --segment_lines 131072 --segments 10 \\
      --source_segments 1 --copies 10
"""
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
    p.add_argument("--segments", type=int, default=10)
    p.add_argument("--source_segments", type=int, default=10)
    p.add_argument("--copies", type=int, default=10)
    args = p.parse_args()
    with open(args.input) as src:
        lines = [line for _, line in zip(
            range(args.segment_lines * args.source_segments), src)]
    if len(lines) < args.segment_lines * args.source_segments:
        p.error(f"{args.input} has {len(lines)} lines, fewer than "
                f"{args.segment_lines * args.source_segments}")
    keys = [[key(c, f) for f in range(26)] for c in range(args.copies)]
    with open(args.output, "w") as out:
        for s in range(args.segments):
            first = (s % args.source_segments) * args.segment_lines
            copy = s % args.copies
            for line in lines[first:first + args.segment_lines]:
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
