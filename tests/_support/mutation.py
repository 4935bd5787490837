"""Byte-level mutation of valid inputs, shared by the record fuzz tests."""

from __future__ import annotations

import random
import struct

INTERESTING = [0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFE, 0xFF]
INTERESTING_INTS = [0, 1, -1, 7, 13, 14, 48, 49, 0x7FFFFFFF, -0x80000000, 1 << 20]


def mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        pos = rng.randrange(len(out) + 1)
        if op == 0 and out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        elif op == 1 and out:
            out[rng.randrange(len(out))] = rng.choice(INTERESTING)
        elif op == 2:
            del out[pos:]
        elif op == 3:
            out[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 4:
            del out[pos : pos + rng.randint(1, 16)]
        elif op == 5:
            out[pos:pos] = out[pos : pos + rng.randint(1, 64)]
        elif op == 6:
            out[pos:pos] = b"\x80" * rng.randint(1, 10)  # lengthen a varint
        elif len(out) >= 4:
            at = rng.randrange(len(out) - 3)
            struct.pack_into(">i", out, at, rng.choice(INTERESTING_INTS))
    return bytes(out)
