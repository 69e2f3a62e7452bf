"""A dense step's push and pull payloads without Protobuf objects per block
(docs/python.md, "A step's cost"): the bytes of one server's ``PushRequest``
and the framing of its ``PullResponse`` depend only on the job, the worker
and the shard map, so they are computed once; a step then copies the
gradients into a serialized request, and a reply's values out of it, one
slice per block, straight between numpy buffers and the payload (a shared
region or the socket's bytes).

The encoding is Protobuf's own wire format: every field the message builder
would write, with the clock (field 3) written last rather than third, which
a parser accepts as the same message (fields may come in any order). A
reply that is not framed as expected (other blocks, another value width,
rows of sparse tables) is left to the caller to parse as a message.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from paramserver import v1

__all__ = ["varint", "PushEncoder", "PullDecoder"]

_CLOCK_TAG = b"\x18"   # PushRequest.clock: field 3, varint.
_GRADIENT_TAG = 0x2A   # PushRequest.gradients: field 5, length-delimited.
_BLOCK_TAG = 0x0A      # PullResponse.blocks: field 1, length-delimited.


def varint(value: int) -> bytes:
    """`value` (>= 0, or an int64 below 0 as its two's complement) as a
    Protobuf base-128 varint."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _entries(tag: int, blocks: Sequence[Tuple[int, int, int]], width: int,
             start: int) -> Tuple[bytes, List[Tuple[int, int, int]]]:
    """The serialized repeated field `tag` of Blocks (key, first value,
    values) with zeros for data, and each block's (offset of its data in
    the message, offset of its first value in a flat vector, bytes), in
    bytes, the message's own bytes starting at `start`."""
    out = bytearray()
    spans = []
    for key, first, n in blocks:
        nbytes = n * width
        block = v1.Block(key=key, data=bytes(nbytes)).SerializeToString()
        entry = bytes([tag]) + varint(len(block)) + block
        # Block.data (field 2) is serialized after the key, so it ends the
        # entry.
        spans.append((start + len(out) + len(entry) - nbytes, first * width,
                      nbytes))
        out += entry
    return bytes(out), spans


class PushEncoder:
    """The serialized PushRequest of one server's blocks of one job's worker.

    `blocks`: (key, first value in the flat vector, values) of each block
    the server holds, in the order the request lists them; `width`: bytes
    per value on the wire (4: float32; 2: FP16 and BF16 bits). Immutable
    after construction; thread-compatible.
    """

    def __init__(self, job_id: str, worker: int, map_version: int,
                 encoding: int, blocks: Sequence[Tuple[int, int, int]],
                 width: int):
        header = v1.PushRequest(job_id=job_id, worker_index=worker,
                                map_version=map_version,
                                gradient_encoding=encoding
                                ).SerializeToString()
        body, self._spans = _entries(_GRADIENT_TAG, blocks, width,
                                     len(header))
        self.template = header + body
        #: Bytes of the request without its clock, and at most with it.
        self.size = len(self.template)
        self.max_size = self.size + 1 + 10

    def encode_into(self, out, wire: np.ndarray, clock: int,
                    template_written: bool = False) -> int:
        """Writes the request of `clock` into the writable buffer `out` (at
        least `max_size` bytes): the template unless `template_written`
        (it is there from an earlier call), each block's bytes of `wire`
        (the flat gradients in the wire format, viewed as uint8), and the
        clock. Returns the request's length."""
        view = np.frombuffer(out, dtype=np.uint8)
        try:
            if not template_written:
                view[:self.size] = np.frombuffer(self.template, np.uint8)
            for dst, src, n in self._spans:
                view[dst:dst + n] = wire[src:src + n]
            tail = _CLOCK_TAG + varint(clock)
            view[self.size:self.size + len(tail)] = np.frombuffer(tail,
                                                                  np.uint8)
            return self.size + len(tail)
        finally:
            del view

    def encode(self, wire: np.ndarray, clock: int) -> bytes:
        """The request of `clock` as bytes (for the socket)."""
        out = bytearray(self.max_size)
        length = self.encode_into(out, wire, clock)
        return bytes(memoryview(out)[:length])


class PullDecoder:
    """Reads one server's PullResponse of float32 values as the server frames
    it: its blocks first (field 1, in the expected order), then the clocks.

    `blocks`: (key, first value in the flat vector, values) of each block
    the server holds, in reply order. Immutable after construction;
    thread-compatible.
    """

    def __init__(self, blocks: Sequence[Tuple[int, int, int]]):
        body, self._spans = _entries(_BLOCK_TAG, blocks, 4, 0)
        self.blocks_end = len(body)
        framing = np.ones(len(body), dtype=bool)
        for dst, _, n in self._spans:
            framing[dst:dst + n] = False
        self._framing_at = np.flatnonzero(framing)
        self._framing = np.frombuffer(body, np.uint8)[self._framing_at].copy()

    def decode(self, payload, length: int,
               out: np.ndarray) -> Optional["v1.PullResponse"]:
        """Copies the values of a reply (the first `length` bytes of the
        buffer `payload`) into `out` (the flat float32 vector, viewed as
        uint8) and returns the reply's other fields (its clocks and sparse
        rows, no blocks); None, writing nothing, if the reply is not framed
        as expected (the caller then parses it as a message)."""
        data = np.frombuffer(payload, dtype=np.uint8, count=length)
        try:
            end = self.blocks_end
            if length < end or not np.array_equal(data[self._framing_at],
                                                  self._framing):
                return None
            if length > end and data[end] == _BLOCK_TAG:
                return None  # More blocks than expected.
            rest = v1.PullResponse.FromString(data[end:].tobytes())
            if len(rest.blocks):
                return None
            for src, dst, n in self._spans:
                out[dst:dst + n] = data[src:src + n]
            return rest
        finally:
            del data
