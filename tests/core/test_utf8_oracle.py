#!/usr/bin/python3
"""core's tr_utf8_lossy against Python: 30,000 random byte strings (bytes around every boundary of
Unicode's Table 3-7: stray continuations, C0/C1/F5+ leads, E0/ED/F0/F4's narrow second bytes,
sequences cut short, valid characters of every length, ASCII) repaired as bytes.decode("utf-8",
"replace") repairs them (one U+FFFD a maximal ill-formed subpart; a quarter of them well-formed), and with per_byte as a handler
giving one U+FFFD for each byte of the range Python's decoder reports (sentencepiece's rule).
usage: test_utf8_oracle.py UTF8_LOSSY"""
import codecs
import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from trident_test import check, finish  # noqa: E402

tool = sys.argv[1]
codecs.register_error("fffd_per_byte", lambda e: ("\ufffd" * (e.end - e.start), e.end))
rng = random.Random(50)
edges = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1,
         0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xF8, 0xFE, 0xFF]
chars = [0x41, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x10FFFF]


def piece(valid):
    k = rng.random() if not valid else 0.45 + 0.25 * rng.random()
    if valid and rng.random() < 0.5:
        return b"ab c"
    if k < 0.45:
        return bytes([rng.choice(edges)])
    if k < 0.7:
        c = rng.choice(chars) if rng.random() < 0.5 else rng.choice([rng.randrange(0x80, 0x800),
                                                                       rng.randrange(0x800, 0xD800),
                                                                       rng.randrange(0x10000, 0x110000)])
        b = chr(c).encode()
        return b if valid else b[:rng.randrange(1, len(b) + 1)]  # whole, or cut short
    if k < 0.85:
        return bytes([rng.randrange(256)])
    return b"ab c"


texts = [b"", b"plain ascii", "\u00e9\u4e2d\U0001f600".encode()]
texts += [b"".join(piece(k % 4 == 0) for _ in range(rng.randrange(1, 24))) for k in range(30000)]
texts.append(bytes(range(256)) * 40)  # one long one, past 8-byte ASCII runs
framed = b"".join(struct.pack("<I", len(t)) + t for t in texts)


def run(mode):
    p = subprocess.run([tool, mode], input=framed, capture_output=True, timeout=60)
    out, at, res = p.stdout, 0, []
    while at + 4 <= len(out):
        n = struct.unpack_from("<I", out, at)[0]
        res.append(out[at + 4:at + 4 + n])
        at += 4 + n
    return p.returncode, res, p.stderr.decode(errors="replace")


invalid = sum(1 for t in texts if t != t.decode("utf-8", "replace").encode())
for mode, errors in (("subpart", "replace"), ("byte", "fffd_per_byte")):
    rc, got, err = run(mode)
    want = [t.decode("utf-8", errors).encode() for t in texts]
    bad = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    check(f"{mode}: {len(texts)} strings ({invalid} ill-formed) = bytes.decode('utf-8', '{errors}')",
          rc == 0 and len(got) == len(texts) and not bad, f"exit {rc} {err} {len(got)} {bad[:3]}")
finish("tr_utf8_lossy against Python's decoding")
