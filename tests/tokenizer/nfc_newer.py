#!/usr/bin/python3
"""Derives tokenizer/normalize.c's nfc_newer table: the code points whose NFC in utf8proc (the
library trident links) differs from tokenizers' NFC (the crate unicode-normalization-alignments,
Unicode 9.0 tables), i.e. characters assigned since 9.0 that have a combining class, a
decomposition or a part in a composition. Each code point c is compared alone and in "a" c U+0301
and "a" c U+0323 (a mark of class 1..219 lets U+0301 compose past it; one of 221..240 moves
after U+0323), and every canonical pair of Python's unicodedata that differs with neither part
found so far adds both parts (a pair of two new characters). Prints the
table's rows. Takes ~30 s. Not a test: run it again when utf8proc's Unicode version changes
(normalize.c refuses other versions).

    usage: nfc_newer.py VENV   (the tokenizer oracle's venv: BUILD/tests/tokenizer/tokenizer-venv)"""
import ctypes
import os
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle_env  # noqa: E402

oracle_env.enter(sys.argv[1])
from tokenizers import normalizers  # noqa: E402

lib = ctypes.CDLL("libutf8proc.so.2")
lib.utf8proc_NFC.restype = ctypes.c_void_p
lib.utf8proc_NFC.argtypes = [ctypes.c_char_p]
lib.utf8proc_unicode_version.restype = ctypes.c_char_p
libc = ctypes.CDLL("libc.so.6")
libc.free.argtypes = [ctypes.c_void_p]


def utf8proc_nfc(s):
    p = lib.utf8proc_NFC(s.encode())
    out = ctypes.string_at(p).decode()
    libc.free(p)
    return out


tokenizers_nfc = normalizers.NFC().normalize_str
newer = set()
for cp in range(0x80, 0x110000):
    if 0xD800 <= cp < 0xE000:
        continue
    c = chr(cp)
    if any(tokenizers_nfc(p) != utf8proc_nfc(p) for p in (c, "a" + c + "\u0301", "a" + c + "\u0323")):
        newer.add(cp)
for cp in range(0x110000):
    d = "" if 0xD800 <= cp < 0xE000 else unicodedata.decomposition(chr(cp))
    if d and not d.startswith("<") and len(d.split()) == 2:
        a, b = (chr(int(x, 16)) for x in d.split())
        if tokenizers_nfc(a + b) != utf8proc_nfc(a + b) and not {ord(a), ord(b)} & newer:
            newer |= {ord(a), ord(b)}  # (Dives Akuru's U+11938: both parts new in 13.0)
rows = []
for cp in sorted(newer):
    if rows and rows[-1][1] == cp - 1:
        rows[-1][1] = cp
    else:
        rows.append([cp, cp])
print(f"/* utf8proc's Unicode {lib.utf8proc_unicode_version().decode()}: {len(rows)} ranges */")
print(", ".join("{0x%X, 0x%X}" % (a, b) for a, b in rows))
