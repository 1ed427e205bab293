"""A generated torture corpus for tokenizers: files of bytes that stress pre-tokenization and
merging. Each file is one text (tokenized whole). Deterministic for a seed.

write_corpus(folder, seed, long_line_bytes) -> list of paths."""
import os
import random

# Characters assigned before Unicode 14 (PCRE2 10.42's tables), so every engine agrees on
# their categories.
CJK = [chr(c) for c in range(0x4E00, 0x9FA6)]
HIRAGANA = [chr(c) for c in range(0x3041, 0x3097)]
HANGUL = [chr(c) for c in range(0xAC00, 0xD7A4)]
HEBREW = [chr(c) for c in range(0x05D0, 0x05EB)]
ARABIC = [chr(c) for c in range(0x0627, 0x064B)]
THAI = [chr(c) for c in range(0x0E01, 0x0E3B)]
DEVANAGARI = [chr(c) for c in range(0x0905, 0x0940)]  # letters and vowel signs (Mn/Mc)
GREEK = [chr(c) for c in range(0x03B1, 0x03CA)]
CYRILLIC = [chr(c) for c in range(0x0430, 0x0450)]
COMBINING = [chr(c) for c in range(0x0300, 0x0370)]
EMOJI = ["\U0001F600", "\U0001F602", "\U0001F44D", "\U0001F44D\U0001F3FD", "\u2764\ufe0f",
         "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",  # family (ZWJ)
         "\U0001F3F3\ufe0f\u200D\U0001F308",  # rainbow flag
         "\U0001F1EB\U0001F1F7", "\U0001F9D1\U0001F3FF\u200D\U0001F4BB", "\u263a", "\U0001F4A9"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085", "\u180e",
          "\u200b", "\u2009", "\u202f", "\ufeff", " \t \n", "\n\n\n", "\x0b", "\x0c", "\x1c"]
CONTRACTIONS = ["it's", "IT'S", "don't", "we'll", "they've", "I'm", "she'd", "you're",
                "O'Neil", "rock'n'roll", "it\u2019s", "'s", "''", "'", "'ll've", "\u017fs"]
NUMBERS = ["1,234,567.89", "1 000 000", "1\u00a0000", "3.14159", "-42", "1e10", "0x1F",
           "\u0661\u0662\u0663", "\u00bd", "\u216b", "2024-01-31", "12:30", "1'000'000",
           "\uff11\uff12\uff13", "99%", "$5", "\u20ac10,50", "123456789012345"]
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "WORLD",
         "tokenizer", "na\u00efve", "caf\u00e9", "Stra\u00dfe", "\u00c5ngstr\u00f6m", "a", "I",
         "<|endoftext|>", "<|begin_of_text|>", "<s>", "</s>", "http://example.com/a?b=c&d",
         "foo_bar", "CamelCase", "e-mail", "x++", "...", "?!", "--", "#tag", "@user"]
INVALID = [b"\x80", b"\xff", b"\xfe", b"\xc0\xaf", b"\xc1\xbf", b"\xe2\x82", b"\xed\xa0\x80",
           b"\xf4\x90\x80\x80", b"\xf0\x9f", b"\xf0\x9f\x98", b"\xe0\x80\xaf", b"\xf8\x88\x80\x80\x80",
           b"\xc3", b"\xc3\x28", b"\xa0\xa1", b"\xe1\x80\xe1\x80\x80"]


def _words(rng, alphabet, lo, hi):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def _mixed(rng, n_items):
    """Text mixing every kind of item, with whitespace between most of them."""
    parts = []
    for _ in range(n_items):
        kind = rng.randrange(12)
        if kind == 0:
            parts.append(_words(rng, CJK + HIRAGANA, 1, 12))
        elif kind == 1:
            parts.append(_words(rng, HANGUL, 1, 6))
        elif kind == 2:
            parts.append(_words(rng, rng.choice([HEBREW, ARABIC, THAI, DEVANAGARI, GREEK, CYRILLIC]), 1, 9))
        elif kind == 3:
            parts.append("".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 4))))
        elif kind == 4:
            w = rng.choice(WORDS)
            parts.append("".join(c + (rng.choice(COMBINING) if rng.random() < 0.4 else "") for c in w))
        elif kind == 5:
            parts.append(rng.choice(CONTRACTIONS))
        elif kind == 6:
            parts.append(rng.choice(NUMBERS))
        elif kind == 7:
            parts.append(rng.choice(SPACES) * rng.randint(1, 5))
        elif kind == 8:
            parts.append(chr(rng.choice(list(range(0, 32)) + [0x7f] + list(range(0x80, 0xa0)))))
        elif kind == 9:
            parts.append("\u200f" + _words(rng, HEBREW, 2, 6) + "\u200e" + rng.choice(WORDS))
        else:
            parts.append(rng.choice(WORDS).upper() if rng.random() < 0.2 else rng.choice(WORDS))
        if rng.random() < 0.7:
            parts.append(" ")
    return "".join(parts)


def _with_invalid(rng, text):
    """UTF-8 of text with invalid byte sequences spliced in between characters."""
    out = bytearray()
    for ch in text:
        out += ch.encode("utf-8", "surrogatepass")
        if rng.random() < 0.02:
            out += rng.choice(INVALID)
    return bytes(out)


def write_corpus(folder, seed=18, long_line_bytes=10 << 20):
    rng = random.Random(seed)
    files = {}
    files["cjk"] = "\n".join(_words(rng, CJK + HIRAGANA + HANGUL + ["\u3001", "\u3002", " "], 20, 200)
                             for _ in range(50)).encode()
    files["emoji"] = " ".join("".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 6)))
                              for _ in range(400)).encode()
    files["combining"] = " ".join(
        "".join(c + "".join(rng.choice(COMBINING) for _ in range(rng.randint(0, 6))) for c in rng.choice(WORDS))
        for _ in range(400)).encode()
    files["rtl"] = " ".join("\u200f" + _words(rng, rng.choice([HEBREW, ARABIC]), 1, 9) + rng.choice(["", "\u200e", ".", "\u060c"])
                            for _ in range(600)).encode()
    files["numbers"] = " ".join(rng.choice(NUMBERS) + rng.choice(["", " ", ",", ".", "\n"]) for _ in range(800)).encode()
    files["contractions"] = " ".join(rng.choice(CONTRACTIONS) + rng.choice(["", " ", "'", "s"])
                                     for _ in range(800)).encode()
    files["whitespace"] = "".join(rng.choice(SPACES) * rng.randint(1, 40) + rng.choice(WORDS + [""])
                                  for _ in range(600)).encode() + b" " * 100000 + b"x" + b"\t\n" * 5000
    files["control"] = "".join(chr(rng.choice(list(range(0, 32)) + [0x7f] + list(range(0x80, 0xa0))))
                               + rng.choice(WORDS + [" ", ""]) for _ in range(3000)).encode()
    files["invalid"] = _with_invalid(rng, _mixed(rng, 3000)) + b"\xf0\x9f\x98"  # ends mid-sequence
    files["long-word"] = b"a" * 20000 + b" " + ("ab" * 5000).encode() + b" " + "\u00e9".encode() * 3000
    files["mixed"] = _mixed(rng, 20000).encode("utf-8", "surrogatepass")
    # the long line: mixed text without newlines, invalid bytes included; past its first MiB
    # the chunks come again in a random order (making each in Python costs ~3 s a MiB)
    chunks, size = [], 0
    while size < long_line_bytes:
        if size < 1 << 20:
            c = _with_invalid(rng, _mixed(rng, 2000).replace("\n", " ").replace("\r", " "))
            distinct = len(chunks) + 1
        else:
            c = chunks[rng.randrange(distinct)]
        chunks.append(c)
        size += len(c)
    files["long-line"] = b"".join(chunks)[:long_line_bytes]
    os.makedirs(folder, exist_ok=True)
    paths = []
    for name, data in files.items():
        p = os.path.join(folder, f"torture-{name}.txt")
        with open(p, "wb") as f:
            f.write(data)
        paths.append(p)
    return paths


# Numbers, punctuation and runs of spaces for the Punctuation and Digits pre-tokenizers
# (Falcon's) and GPT-NeoX's added runs of spaces: 3+ digit numbers, Unicode digits and
# fractions (Arabic-Indic, Devanagari, fullwidth, mathematical, superscripts, vulgar fractions,
# Roman numerals, digits newer than PCRE2's or Python's tables), ASCII and Unicode punctuation
# (and punctuation that the unicode_categories crate behind tokenizers' Punctuation is too old
# to know), Latin-1 characters whose UTF-8 holds the bytes B2 B3 B9 BC BD BE (numeric in GPT-2's
# byte alphabet: '\u043c' is D0 BC), Falcon's added tokens.
DIGIT_PUNCT_PIECES = [
    "1234567", "12,345.67", "3.14159265", "123456789012", "007", "1000000", "42", "9", "99.9%",
    "\u0663\u0664\u0665", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669",
    "\u0966\u0967\u0968\u0969", "\uff11\uff12\uff13\uff14", "\U0001d7d9\U0001d7da\U0001d7db",
    "\u00b2", "x\u00b2y", "10\u00b3", "\u00b9\u00b2\u00b3", "\u00bd", "\u00bc\u00be", "\u2153",
    "12\u00bd3456", "\u00bd6789", "\u216b", "\u2160\u2161", "\u2460\u2461", "\u2070\u2074",
    "\U00010d40\U00010d41", "\U000116d0\U000116d1", "\U00011bf0", "\U00011950\U00011951",
    "\u043c and \u043c\u0438\u0440 999", "\u00bc\u043c\u00b2", "2024-01-31", "(555) 123-4567",
    "$1,000,000.00", "1e-10", "0x1F", "#123", "A1B22C333D4444", "3/4", "1:23:45",
    "\u00abquoted\u00bb", "\u2014", "\u2013", "\u2026", "\u3002", "\u3001", "\u00bfQu\u00e9?",
    "\u00a1Hola!", "\u201ccurly\u201d", "\u2018single\u2019", "\u201elow\u201c", "\u2039\u203a",
    "\u00a71.2", "\u00b6", "\u00b7", "\u2020\u2021", "\u203b", "\u3008\u3009", "\u3010\u3011",
    "\u300c\u300d", "\uff08\uff09", "\uff01\uff1f", "\u203c", "\u2049", "\u061f", "\u060c",
    "\u061d", "\u2e43", "\u2e4e\u2e4f", "\u2e52", "\u05be", "\u0589", "...", "!!!", "?!?", "---",
    "***", "~~~", "@#$%^&*", "\\", "`code`", "{[()]}", "'s", "don't", "<|endoftext|>",
    ">>TITLE<<", ">>ABSTRACT<<x", "a>>SUMMARY<<b", ">>COMMENT", "hello", "World", "caf\u00e9",
    "\u4e2d\u6587", "\U0001f44d",
]
SPACE_PIECES = [" " * k for k in range(1, 31)] + ["\t  \t", "\n   \n", "\u00a0\u00a0", "\u3000  ",
                                                 "  \u0301", " \r\n  "]


def digit_punct_space_texts(seed=29, n=300):
    """Texts of DIGIT_PUNCT_PIECES and SPACE_PIECES: each piece alone, then n random mixes."""
    rng = random.Random(seed)
    texts = DIGIT_PUNCT_PIECES + SPACE_PIECES + ["x" + s + "y" for s in SPACE_PIECES]
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 16)):
            parts.append(rng.choice(DIGIT_PUNCT_PIECES if rng.random() < 0.7 else SPACE_PIECES))
            parts.append(rng.choice(["", "", " ", "  ", "\n", "    ", "a", "12"]))
        texts.append("".join(parts))
    return texts
