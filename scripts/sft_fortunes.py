#!/usr/bin/env python3
"""A small supervised fine-tuning set from the demo corpus (Debian's fortunes): "complete this
fortune" examples as JSON Lines {"prompt", "response"} for
`trident preprocess --json-keys prompt,response`.

usage: sft_fortunes.py OUT.jsonl [--corpus DIR] [--max N] [--seed S] [--min-bytes A]
                        [--max-bytes B]
DIR: --corpus, else $TRIDENT_DEMO_CORPUS, else /usr/share/games/fortunes. Fortunes (the
"%"-separated pieces of each file but .dat/.u8 and links) of A..B bytes of UTF-8 text (default
30..100: with the prompt's 23 bytes and the EOD an example fits the tiny model's 128 + 1
tokens whole, and short ones pack two to a sequence) are kept, in file order, then N of them drawn with random.Random(S); each is cut at the word
boundary nearest its middle: prompt "Complete this fortune:\\n" + the first half, response the
rest. Prints the number of examples written."""
import json
import os
import random
import sys


def corpus_files(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder)
                  if not f.endswith((".dat", ".u8")) and os.path.isfile(os.path.join(folder, f))
                  and not os.path.islink(os.path.join(folder, f)))


def fortunes(files, lo, hi):
    for path in files:
        with open(path, "rb") as f:
            raw = f.read()
        for piece in raw.split(b"\n%\n"):
            try:
                text = piece.decode("utf-8").strip("\n%")
            except UnicodeDecodeError:
                continue
            if lo <= len(text.encode()) <= hi and "\x00" not in text:
                yield text


def example(text):
    mid = len(text) // 2
    cut = min((i for i, c in enumerate(text) if c in " \n"), key=lambda i: abs(i - mid), default=mid)
    return {"prompt": "Complete this fortune:\n" + text[:cut + 1], "response": text[cut + 1:] + "\n"}


def main(argv):
    args = argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    out, opts = args[0], dict(zip(args[1::2], args[2::2]))
    folder = opts.get("--corpus") or os.environ.get("TRIDENT_DEMO_CORPUS") or "/usr/share/games/fortunes"
    if not os.path.isdir(folder):
        sys.exit(f"sft_fortunes.py: no corpus folder {folder} (install fortunes, or set "
                 "TRIDENT_DEMO_CORPUS)")
    lo, hi = int(opts.get("--min-bytes", 30)), int(opts.get("--max-bytes", 100))
    items = [example(t) for t in fortunes(corpus_files(folder), lo, hi)]
    items = [e for e in items if e["response"].strip()]
    n = int(opts.get("--max", len(items)))
    random.Random(int(opts.get("--seed", 1))).shuffle(items)
    with open(out, "w") as f:
        for e in items[:n]:
            f.write(json.dumps(e) + "\n")
    print(min(n, len(items)))


if __name__ == "__main__":
    main(sys.argv)
