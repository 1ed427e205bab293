#!/usr/bin/python3
"""tokenizer/pretok_classes.h from Hugging Face `tokenizers` itself: the code points its
Punctuation pre-tokenizer splits on (char::is_ascii_punctuation or the unicode_categories
crate's is_punctuation, an older Unicode than Rust's) and those its Digits pre-tokenizer splits
on (Rust's char::is_numeric, the Unicode of the Rust that built the wheel), found by running
the two pre-tokenizers over every code point. Neither set is any one Unicode version's
categories (nor PCRE2's \\p{P} / \\p{N}), hence the tables.

    gen_pretok_classes.py VENV            # write tokenizer/pretok_classes.h
    gen_pretok_classes.py VENV --check    # exit 1 when the header differs from tokenizers'
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
HEADER = os.path.join(HERE, "..", "..", "tokenizer", "pretok_classes.h")


def class_members(pre_tokenizer):
    """Code points that pre_tokenizer (a split on a char predicate, each match one character)
    puts in a piece of their own between two 'a's ('a' is in neither class)."""
    members = []
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    for i in range(0, len(cps), 4096):
        chunk = cps[i:i + 4096]
        pieces = pre_tokenizer.pre_tokenize_str("a" + "a".join(chr(c) for c in chunk) + "a")
        alone = {ord(p) for p, _ in pieces if len(p) == 1 and p != "a"}
        members += [c for c in chunk if c in alone]
    return members


def ranges(cps):
    out = []
    for c in cps:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def header():
    import tokenizers
    from tokenizers import pre_tokenizers
    punct = ranges(class_members(pre_tokenizers.Punctuation("isolated")))
    digit = ranges(class_members(pre_tokenizers.Digits(individual_digits=True)))
    lines = [f"/* Generated from tokenizers {tokenizers.__version__} by "
             "tests/tokenizer/gen_pretok_classes.py; do not edit.",
             " * The code points its Punctuation and Digits pre-tokenizers split on (ranges). */",
             "#ifndef TR_PRETOK_CLASSES_H", "#define TR_PRETOK_CLASSES_H", "",
             "#include <stdint.h>", ""]
    for name, rs in [("punct_ranges", punct), ("numeric_ranges", digit)]:
        lines.append(f"static const uint32_t {name}[][2] = {{")
        row = "   "
        for lo, hi in rs:
            item = f" {{0x{lo:X}, 0x{hi:X}}},"
            if len(row) + len(item) > 99:
                lines.append(row)
                row = "   "
            row += item
        lines += [row, "};", ""]
    lines.append("#endif")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import oracle_env
    oracle_env.enter(sys.argv[1])
    text = header()
    if "--check" in sys.argv:
        with open(HEADER) as f:
            same = f.read().split("\n", 2)[2] == text.split("\n", 2)[2]  # (the version line aside)
        print(("PASS" if same else "FAIL") + ": tokenizer/pretok_classes.h holds tokenizers' "
              "Punctuation and Digits classes")
        sys.exit(0 if same else 1)
    with open(HEADER, "w") as f:
        f.write(text)
