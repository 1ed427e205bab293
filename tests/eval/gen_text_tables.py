#!/usr/bin/python3
"""Writes eval/text_tables.h: the code point classes and case maps of Python's str that
eval/text.c and eval/regex.c need (the Unicode database of the Python that runs this).
usage: gen_text_tables.py > eval/text_tables.h"""
import sys
import unicodedata
from re import _casefix

N = sys.maxunicode + 1


def ranges(pred):
    out, start = [], None
    for c in range(N):
        if pred(chr(c)):
            start = c if start is None else start
        elif start is not None:
            out.append((start, c - 1))
            start = None
    if start is not None:
        out.append((start, N - 1))
    return out


def case_runs(fn):
    """Runs {first, last, delta, step} of the code points c with fn(c) one other code point
    c + delta, every step-th code point of [first, last] (step 1 or 2)."""
    out = []
    for c in range(N):
        m = fn(chr(c))
        if len(m) != 1 or m == chr(c):
            continue
        d = ord(m) - c
        if out and out[-1][2] == d and c - out[-1][1] in (1, 2) and out[-1][3] in (0, c - out[-1][1]):
            out[-1][3] = c - out[-1][1]
            out[-1][1] = c
        else:
            out.append([c, c, d, 0])
    for r in out:
        r[3] = r[3] or 1
    return out


def specials(fn):
    return [(c, [ord(x) for x in fn(chr(c))]) for c in range(N) if len(fn(chr(c))) > 1]


def emit(name, rows, per_line):
    print(f"static const {name} = {{")
    line = "   "
    for r in rows:
        item = " {" + ", ".join(r) + "},"
        if len(line) + len(item) > 99:
            print(line)
            line = "   "
        line += item
    print(line)
    print("};")
    print()


print(f"""/* Generated from Python {sys.version.split()[0]} (Unicode {unicodedata.unidata_version}) by
 * tests/eval/gen_text_tables.py; do not edit. Python's str classes and case maps: the code
 * points \\w and \\d of its re module match (str.isalnum() or "_"; str.isdecimal()), and
 * str.lower() / str.upper(); the punctuation (categories P*) and the re module's extra case
 * equivalents (re._casefix). */
#ifndef TR_EVAL_TEXT_TABLES_H
#define TR_EVAL_TEXT_TABLES_H

#include <stdint.h>
""")
emit("uint32_t word_ranges[][2]", [(hex(a).upper().replace("0X", "0x"), hex(b).upper().replace("0X", "0x"))
                                    for a, b in ranges(lambda c: c.isalnum() or c == "_")], 6)
emit("uint32_t decimal_ranges[][2]", [(hex(a).upper().replace("0X", "0x"), hex(b).upper().replace("0X", "0x"))
                                       for a, b in ranges(str.isdecimal)], 6)
emit("uint32_t punct_ranges[][2]", [(hex(a).upper().replace("0X", "0x"), hex(b).upper().replace("0X", "0x"))
                                     for a, b in ranges(lambda c: unicodedata.category(c).startswith("P"))], 6)
print("/* {c, the code points re's IGNORECASE also takes for it (0-padded)}: c lowered */")
cases = sorted(_casefix._EXTRA_CASES.items())
assert all(len(v) <= 2 for _, v in cases)
emit("uint32_t extra_cases[][3]", [(hex(c).upper().replace("0X", "0x"),
                                    *[hex(x).upper().replace("0X", "0x") for x in list(v) + [0] * (2 - len(v))])
                                   for c, v in cases], 4)
print("/* {first, last, delta, step}: c in [first, last] with (c - first) % step == 0 maps to c + delta */")
for name, fn in (("lower_runs", str.lower), ("upper_runs", str.upper)):
    emit(f"int32_t {name}[][4]", [(hex(a).upper().replace("0X", "0x"), hex(b).upper().replace("0X", "0x"),
                                   str(d), str(s)) for a, b, d, s in case_runs(fn)], 4)
print("/* {c, its mapping (up to 3 code points, 0-padded)}: the code points that map to several */")
for name, fn in (("lower_special", str.lower), ("upper_special", str.upper)):
    rows = specials(fn)
    assert all(len(m) <= 3 for _, m in rows)
    emit(f"uint32_t {name}[][4]", [(hex(c).upper().replace("0X", "0x"),
                                    *[hex(x).upper().replace("0X", "0x") for x in m + [0] * (3 - len(m))])
                                   for c, m in rows], 4)
print("#endif")
