#!/usr/bin/python3
"""eval/regex.c and eval/filter.c against Python (plain python3, no torch), through
eval_filter_tool:
  - the regex matcher: a few hundred (pattern, text) pairs drawn from the supported syntax
    (literals and escapes, classes with ranges and negation, ., groups, alternation, greedy and
    lazy quantifiers, anchors, word boundaries, flags (?s) (?m) (?a)), ASCII and non-ASCII
    texts: re.findall's list (tuples for several groups) and re.sub(pattern, "", text) equal
    Python's, and a pattern Python refuses is refused; lm-evaluation-harness's own patterns
    (GSM8K's strict-match and flexible-extract, its regexes_to_ignore) on GSM8K-style texts,
    and "(?s).*#### " on 4000 characters (quadratic, within the budget);
  - lookarounds, backreferences (\\1 and (?P=name)), inline flags (?i) (?x) (?s) (?m) (?a) at the
    start and scoped (?i:...) (?-i:...): ~300 drawn patterns over mixed-case ASCII and non-ASCII
    texts (case pairs Python's IGNORECASE folds: Kelvin sign, long s, dotless i, final sigma,
    micro sign, ...), each of ~50 characters alone and in a class under (?i), BBH's
    chain-of-thought filter; variable-width lookbehinds and bad references refused as Python
    refuses them;
  - the refused syntax (possessive, atomic, conditional, \\N{...}, a case-insensitive class past
    U+FFFF): an error naming the pattern; a hostile pattern ((a*)*b) ends in an error naming the
    step budget;
  - filter pipelines (strict-match, flexible-extract, lowercase, uppercase, remove_whitespace,
    group_select and fallback; GPQA's lookbehind strict-match and multi_choice_regex, map,
    take_first_k and majority_vote over repeats, on texts with their requests' choices) and
    exact_match with GSM8K's metric options (ignore_case, ignore_punctuation, ignore_numbers,
    regexes_to_ignore) against a Python port of the harness's filters (filters/extraction.py,
    selection.py, transformation.py) and exact_match_hf_evaluate (then both stripped, as
    trident's exact_match is);
  - refused settings: exit 2 naming the key, function, metric or pattern; multi_choice_regex
    without the request's choices: an error naming them.
usage: test_eval_filters.py TOOL WORKDIR"""
import collections
import json
import os
import random
import re
import sys
import unicodedata
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

tool, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
warnings.simplefilter("ignore")  # (Python's FutureWarning on "[[" and the like)


def run_tool(*args):
    r = tt.run([tool, *args], timeout=120)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    return r.returncode, lines, r.stderr


# ---- the regex matcher against re ----
rng = random.Random(5)
ALPHA = ["a", "b", "c", "1", "2", "0", " ", ".", ",", "$", "#", "-", "\n", "_", "X",
         "\u00e9", "\u65e5", "\u00bd", "\u00b2", "\u0663", "\u2014", "\u00a0"]
LIT = ["a", "b", "c", "1", "2", " ", "\\.", "\\-", "\\$", "#", ",", "\\n", "\u00e9", "\\x61",
       "\\u65e5", "\\t", "_", "\\#"]
ESC = ["\\d", "\\D", "\\w", "\\W", "\\s", "\\S"]
CLASSES = ["[a-c]", "[^a-c]", "[0-9.,]", "[\\d.,$]", "[^\\s]", "[\\w-]", "[a\\-z]", "[]a]",
           "[^]a]", "[$0-9.,]", "[-a]", "[a-]", "[\u00e0-\u00ff1]", "[\\W\\d]", "[.]"]


def gen_atom(depth):
    k = rng.random()
    if depth < 3 and k < 0.18:
        inner = gen_alt(depth + 1)
        return rng.choice(["(%s)", "(?:%s)", "(?P<g%d>%%s)" % rng.randint(0, 99)]) % inner
    if k < 0.45:
        return rng.choice(LIT)
    if k < 0.6:
        return rng.choice(ESC)
    if k < 0.75:
        return rng.choice(CLASSES)
    if k < 0.83:
        return "."
    return rng.choice(["^", "$", "\\b", "\\B", "\\A", "\\Z"])


def gen_quant(atom):
    if atom in ("^", "$", "\\b", "\\B", "\\A", "\\Z") and rng.random() < 0.9:
        return atom
    q = rng.choice(["", "", "", "*", "+", "?", "{2}", "{1,}", "{0,2}", "{,2}", "{1,3}", "{2,}",
                    "{", "{}", "{,}"])
    if q and q not in ("{", "{}") and rng.random() < 0.3:
        q += "?"
    return atom + q


def gen_seq(depth):
    return "".join(gen_quant(gen_atom(depth)) for _ in range(rng.randint(0, 4)))


def gen_alt(depth=0):
    return "|".join(gen_seq(depth) for _ in range(rng.choice([1, 1, 1, 2, 3])))


def gen_text():
    return "".join(rng.choice(ALPHA) for _ in range(rng.randint(0, 16)))


cases = []
for _ in range(500):
    p = gen_alt()
    if rng.random() < 0.15:
        p = rng.choice(["(?s)", "(?m)", "(?a)", "(?sm)"]) + p
    cases.append({"pattern": p, "text": gen_text()})
# the harness's patterns on GSM8K-style texts
GSM_TEXTS = ["Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 "
             "clips altogether in April and May.\n#### 72",
             "She pays $1,234.50 in total. The answer is 1,234.5.", "#### -3.5\n\n#### 7",
             "no number here", "It costs $5", "answer: 12 apples, 3 pears,", "-7 or -8?", "",
             "#### 1,000\nQuestion: what next", "\u0663\u0664 in Arabic digits, 56 in ASCII"]
HARNESS = ["#### (\\-?[0-9\\.\\,]+)", "(-?[$0-9.,]{2,})|(-?[0-9]+)", ",", "\\$", "(?s).*#### ",
           "\\.$", "The answer is (\\-?[0-9\\.\\,]*[0-9]+)", "(?:answer:?)\\s*(\\d+)",
           "\\b(A|B|C|D)\\b", "[Tt]he answer is:? ?(.*?)\\.", "(\\d+)(?:,(\\d+))?"]
for p in HARNESS:
    for t in GSM_TEXTS:
        cases.append({"pattern": p, "text": t})
# lookarounds, backreferences and inline flags (drawn from their own generator, so the cases
# above stay as they were)
rng2 = random.Random(11)
CASED = ["a", "A", "b", "B", "k", "K", "s", "S", "i", "I", "\u212a", "\u017f", "\u0131", "\u0130",
         "\u00e9", "\u00c9", "\u03c3", "\u03a3", "\u03c2", "\u00b5", "\u03bc", "\u039c", "\u00df",
         "\u1e9e", "\u2126", "\u03c9", "\u01c5", "\u01c4", "\u01c6", "\u0345", "\u03b9", "\u1fbe"]
ALPHA2 = CASED + [" ", "1", "2", "\n", ".", "_", "\u65e5"]
LIT2 = ["a", "A", "b", "k", "S", "s", "i", "I", "\u00e9", "\u00c9", "\u03c3", "\u03a3", "\u00b5",
        "\u212a", "\u0131", "\u0130", " ", "1", "\\.", "\\\\"]
CLASSES2 = ["[a-c]", "[A-C]", "[^a]", "[k-s]", "[\u00c0-\u00df]", "[\u03c3]", "[\\w\u00e9]", "[^\\W\\d]",
            "[Ii]", "[\u0130\u0131]", "[\u212a]", "[\u017fx]"]


def gen_atom2(depth, groups):
    k = rng2.random()
    if depth < 3 and k < 0.30:
        inner = gen_alt2(depth + 1, groups)
        kind = rng2.random()
        if kind < 0.25:
            groups.append(len(groups) + 1)
            return "(%s)" % inner
        if kind < 0.4:
            return rng2.choice(["(?=%s)", "(?!%s)"]) % inner
        if kind < 0.6:  # fixed width as often as not
            body = rng2.choice([inner, rng2.choice(LIT2), "[a-c]{2}", "\\w", "a|b", "ab|cd", "\\d\\s"])
            return rng2.choice(["(?<=%s)", "(?<!%s)"]) % body
        if kind < 0.8:
            return rng2.choice(["(?i:%s)", "(?-i:%s)", "(?s:%s)", "(?m:%s)", "(?a:%s)", "(?x:%s)",
                                "(?i-s:%s)", "(?ai:%s)"]) % inner
        groups.append(len(groups) + 1)
        return "(?P<n%d>%s)" % (len(groups), inner)
    if k < 0.42 and groups:
        g = rng2.choice(groups)
        return rng2.choice(["\\%d" % g, "(?P=n%d)" % g, "\\%d" % (g + 1)])
    if k < 0.65:
        return rng2.choice(LIT2)
    if k < 0.75:
        return rng2.choice(ESC)
    if k < 0.88:
        return rng2.choice(CLASSES2)
    if k < 0.93:
        return "."
    return rng2.choice(["^", "$", "\\b", "\\B", " ", "# c\n"])


def gen_quant2(atom):
    if atom in ("^", "$", "\\b", "\\B", " ", "# c\n") or rng2.random() < 0.6:
        return atom
    return atom + rng2.choice(["*", "+", "?", "{2}", "{0,2}", "*?", "+?", "??"])


def gen_alt2(depth, groups):
    return "|".join("".join(gen_quant2(gen_atom2(depth, groups)) for _ in range(rng2.randint(1, 4)))
                    for _ in range(rng2.choice([1, 1, 2])))


for _ in range(300):
    p = gen_alt2(0, [])
    if rng2.random() < 0.45:
        p = rng2.choice(["(?i)", "(?x)", "(?ix)", "(?is)", "(?im)", "(?ai)", "(?#c)(?i)"]) + p
    cases.append({"pattern": p, "text": "".join(rng2.choice(ALPHA2) for _ in range(rng2.randint(0, 14)))})
# each cased character alone and in a class under (?i), in a text of all of them
ALL = "".join(CASED) + "".join(c.upper() for c in CASED) + "".join(c.lower() for c in CASED)
for c in CASED + ["\u1e60", "\u1e9b", "\u0398", "\u03d1", "\u03f4", "\u1c80", "\u0432", "\ua64b",
                  "\ufb05", "\ufb06", "\u0390", "\u1fd3", "\U00010400", "\U00010428"]:
    cases += [{"pattern": "(?i)" + c, "text": ALL + "\u1e60\u1e61\u1e9b\u03d1\u1c80\ufb05\ufb06\U00010400"},
              {"pattern": "(?i)[%s]" % c if ord(c) < 0x10000 else "(?i)[^%s]" % "\u1e61",
               "text": ALL + "\u1e60\u1e61\u1e9b"},
              {"pattern": "(?i)(%s)\\1" % c, "text": "".join(x + y for x in (c, c.upper(), c.lower())
                                                            for y in (c, c.upper(), c.lower()))}]
# BBH's and GPQA's chain-of-thought filters, the harness's patterns with lookarounds
BBH = ["(?<=the answer is )(.*)(?=.)", "(?<=The answer is )(.*)(?=.)", "(?i)the answer is (\\([A-Z]\\))",
       "(?<=answer: )\\w+", "(?<![\\d.])\\d+(?![\\d.])"]
for p in BBH:
    for t in ["Let's think step by step. So the answer is (B).", "the answer is True.",
              "The answer is 42.\nthe answer is 7.", "THE ANSWER IS (C)", "answer: yes; 3.5 and 12", ""]:
        cases.append({"pattern": p, "text": t})
# by hand: captures inside lookarounds (kept from a positive one, dropped from a negative one),
# a lookaround's atomicity, references under (?i), scoped flags' reach
HAND = [("(?=(a))", "aaa"), ("(?<=(a))b", "ab cb"), ("(?=(\\w+))\\w", "ab cd"), ("(?!(a))(\\w)", "ab"),
        ("(?=(a+))a*b\\1", "aaab aab"), ("(?=(a|ab))\\1c", "abc ac"), ("(?<=(\\w)(\\w))\\2", "abb"),
        ("(?i)(?P<q>[a-z])(?P=q)", "aA Bb cd"), ("(?i:a(?-i:b)c)", "ABC AbC abc"), ("(?x: a b)c", "abc"),
        ("(?s:.)(?m:$).", "a\nb"), ("(?a:\\w+)\\w", "\u00e9t\u00e9 ab\u00e9"),
        ("(?!a|\\w)\\w|-", "ab-"), ("(?<!a|b)c", "ac bc c"), ("(?=a*|b)a(?!(b)|a|c)", "aab ac ad")]
cases += [{"pattern": p, "text": t} for p, t in HAND]
# a quadratic pattern on a long generation (4000 characters): within the budget, as Python's
cases += [{"pattern": "(?s).*#### ", "text": "word " * 800},
          {"pattern": "(?s).*#### ", "text": "word " * 800 + "#### 72"}]


def py_result(pattern, text):
    try:
        rx = re.compile(pattern)
    except (re.error, OverflowError, ValueError):
        return None
    return {"findall": [list(m) if isinstance(m, tuple) else m for m in rx.findall(text)],
            "sub": rx.sub("", text)}


tt.write(os.path.join(work, "cases.json"), json.dumps(cases))
rc, got, err = run_tool("regex", os.path.join(work, "cases.json"))
check("regex cases: exit 0, a line each", rc == 0 and len(got) == len(cases), f"exit {rc} {err[-500:]}")
agree = refused_both = 0
for case, res in zip(cases, got):
    want = py_result(case["pattern"], case["text"])
    if want is None:
        ok = "error" in res and case["pattern"][:20] in res["error"]
        refused_both += ok
        check(f"regex {case['pattern']!r}: refused as Python refuses it", ok, res)
        continue
    ok = res == want
    agree += ok
    check(f"regex {case['pattern']!r} on {case['text']!r}: findall and sub as Python's", ok,
          f"got {res}, Python {want}")
check(f"regex: {agree} patterns agree with Python, {refused_both} refused by both (>= 400)",
      agree >= 400, agree)

# refused syntax: an error naming the pattern
REFUSED = ["a*+", "a++", "(?>a)", "(a)?(?(1)b|c)", "\\N{DIGIT ONE}", "(?i)[\U00010400]",
           "(?i)[^\U00010400-\U00010500]", "(?t)a", "(?#never closed", "[a-", "a)", "(a", "*a", "a**",
           "\\q", "[b-a]", "x{3,2}", "^*", "(?<=a+)b", "(?<!a|bc)x", "(a)\\2", "(a\\1)",
           "(?P=y)", "(?<=(a)\\1)b", "a(?i)b", "(?i-i:a)", "(?-a:a)", "(?L)a", "(?au)a"]
cases = [{"pattern": p, "text": "abc"} for p in REFUSED]
cases.append({"pattern": "(a*)*b", "text": "a" * 40, "steps": 100000})
cases.append({"pattern": "(a|aa)*c", "text": "a" * 60, "steps": 1000000})
tt.write(os.path.join(work, "refused.json"), json.dumps(cases))
rc, got, err = run_tool("regex", os.path.join(work, "refused.json"))
check("refused patterns: a line each", len(got) == len(cases), err[-500:])
for case, res in zip(cases, got):
    msg = res.get("error", "")
    check(f"regex {case['pattern']!r}: refused, naming the pattern", case["pattern"] in msg, res)
for res in got[-2:]:
    check("a hostile pattern: the error names the step budget", "steps" in res.get("error", ""), res)


# ---- filters and exact_match against a port of the harness's ----
def harness_regex(resp, pattern, group_select=0, fallback="[invalid]"):
    match = re.findall(pattern, resp)
    if not match:
        return fallback
    try:
        match = match[group_select]
    except IndexError:  # (the harness raises; trident takes the fallback)
        return fallback
    if isinstance(match, tuple):
        valid = [m for m in match if m]
        return valid[0].strip() if valid else fallback
    return match.strip()


def harness_multi_choice(resp, choices, st):
    """MultiChoiceRegexFilter on one response: the step's regex, else the (ignored) choices
    themselves as "(X)", else ":\\s*X" as "(X)", else the fallback."""
    gs = st.get("group_select", 0)

    def ignored(text):
        for r in st.get("regexes_to_ignore") or []:
            text = re.sub(r, "", text)
        if st.get("ignore_case"):
            text = text.lower()
        if st.get("ignore_punctuation"):
            text = "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))
        return text

    def first(rx, text, relabel):
        found = rx.findall(text)
        if not found:
            return ""
        try:
            m = found[gs]
        except IndexError:  # (the harness raises; trident takes it as no match)
            return ""
        if isinstance(m, tuple):
            m = next((x for x in m if x), "")  # (all empty: the harness raises)
        m = m.strip()
        return relabel.get(m, m) if m else m

    letters = [chr(ord("A") + i) for i in range(len(choices))]
    by_text = {ignored(c.strip()): f"({x})" for c, x in zip(choices, letters)}
    alternatives = "|".join(re.escape(ignored(c.strip())) for c in choices)
    got = first(re.compile(st.get("regex_pattern", r"#### (\-?[0-9\.\,]+)")), resp, {})
    got = got or first(re.compile(alternatives), ignored(resp), by_text)
    got = got or first(re.compile(r":[\s]*(%s)" % "|".join(letters)), resp,
                       {x: f"({x})" for x in letters})
    return got or st.get("fallback", "[invalid]")


def harness_pipeline(steps, resp, repeats=1, choices=None):
    """The harness's filter ensemble over a request's `repeats` responses (equal: greedy);
    the scored text is the first left."""
    resps = [resp] * repeats
    for st in steps:
        fn = st["function"]
        if fn == "regex":
            resps = [harness_regex(x, st.get("regex_pattern", r"#### (\-?[0-9\.\,]+)"),
                                   st.get("group_select", 0), st.get("fallback", "[invalid]"))
                     for x in resps]
        elif fn == "lowercase":
            resps = [x.lower() for x in resps]
        elif fn == "uppercase":
            resps = [x.upper() for x in resps]
        elif fn == "remove_whitespace":
            resps = [x[1:] if x.startswith(" ") else x for x in resps]
        elif fn == "take_first":
            resps = resps[:1]
        elif fn == "take_first_k":
            assert len(resps) >= st["k"]
            resps = resps[:st["k"]]
        elif fn == "majority_vote":
            resps = [collections.Counter(resps).most_common(1)[0][0]]
        elif fn == "map":
            resps = [st.get("mapping_dict", {}).get(x, st.get("default_value")) for x in resps]
        elif fn == "multi_choice_regex":
            resps = [harness_multi_choice(x, choices, st) for x in resps]
    return resps[0]


def harness_exact(pred, ref, opts):
    for s in opts.get("regexes_to_ignore", []):
        pred, ref = re.sub(s, "", pred), re.sub(s, "", ref)
    if opts.get("ignore_case"):
        pred, ref = pred.lower(), ref.lower()
    import string
    if opts.get("ignore_punctuation"):
        table = str.maketrans("", "", string.punctuation)
        pred, ref = pred.translate(table), ref.translate(table)
    if opts.get("ignore_numbers"):
        table = str.maketrans("", "", string.digits)
        pred, ref = pred.translate(table), ref.translate(table)
    return pred.strip() == ref.strip()


GSM8K = {"filter_list": [
    {"name": "strict-match", "filter": [{"function": "regex", "regex_pattern": r"#### (\-?[0-9\.\,]+)"},
                                        {"function": "take_first"}]},
    {"name": "flexible-extract", "filter": [{"function": "regex", "group_select": -1,
                                             "regex_pattern": r"(-?[$0-9.,]{2,})|(-?[0-9]+)"},
                                            {"function": "take_first"}]},
    {"name": "default-regex", "filter": [{"function": "regex"}]},
    {"name": "second", "filter": [{"function": "regex", "regex_pattern": r"\d+", "group_select": 1,
                                   "fallback": "none"}]},
    {"name": "far", "filter": [{"function": "regex", "regex_pattern": r"\d+", "group_select": -9}]},
    {"name": "lower", "filter": [{"function": "remove_whitespace"}, {"function": "lowercase"}]},
    {"name": "upper", "filter": [{"function": "uppercase"}]},
    {"name": "empty-groups", "filter": [{"function": "regex", "regex_pattern": r"(x?)(y?)z"}]}],
    "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                     "ignore_case": True, "ignore_punctuation": False,
                     "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]}],
    "task": "gsm8k", "output_type": "generate_until"}
PLAIN = {"filter_list": [{"name": "none", "filter": [{"function": "take_first"}]}],
         "metric_list": [{"metric": "exact_match", "ignore_punctuation": True, "ignore_numbers": True}]}
texts = []
for t in GSM_TEXTS + ["  Stra\u00dfe \u0130stanbul \u03a3\u039f\u03a3 z", " The answer is 72.",
                      "\t#### 72\n", "1 2 3 4 5 6 7 8 9 10 z", "ANSWER: Paris!"]:
    for target in ["72", "1,234.5", "-3.5", "paris", "7", "The answer is 72", "Paris"]:
        texts.append({"text": t, "target": target})
texts.append({"text": "Natalia: 10\n#### 72", "target": "Natalia sold 48 clips.\n#### 72"})
tt.write(os.path.join(work, "texts.json"), json.dumps(texts))
# GPQA's and BBH's pipelines (lookbehind, multi_choice_regex), map, take_first_k and
# majority_vote over repeats, on texts with their requests' choices
CHOICE = {"repeats": 4, "generation_kwargs": {"until": ["</s>"], "do_sample": False},
          "filter_list": [
    {"name": "strict-match", "filter": [{"function": "regex", "regex_pattern": "(?<=The answer is )(.*)(?=.)"},
                                        {"function": "take_first"}]},
    {"name": "flexible-extract", "filter": [{"function": "multi_choice_regex", "group_select": -1,
                                             "ignore_case": True, "ignore_punctuation": True,
                                             "regex_pattern": "(\\([A-Z]\\))"},
                                            {"function": "take_first"}]},
    {"name": "mc-default", "filter": [{"function": "multi_choice_regex", "fallback": "none",
                                       "regexes_to_ignore": ["\\s+", "(?i)the "]}]},
    {"name": "mc-cased", "filter": [{"function": "remove_whitespace"},
                                    {"function": "multi_choice_regex", "regex_pattern": "(?i)answer is (\\w)\\b",
                                     "group_select": 1, "ignore_punctuation": True}]},
    {"name": "mapped", "filter": [{"function": "multi_choice_regex", "regex_pattern": "\\(([A-Z])\\)"},
                                  {"function": "map", "mapping_dict": {"A": "yes", "(B)": "no", "(C)": "maybe",
                                                                       "C": "c"},
                                   "default_value": "unknown"}]},
    {"name": "vote", "filter": [{"function": "take_first_k", "k": 3},
                                {"function": "regex", "regex_pattern": "(?i)answer is (\\S+)"},
                                {"function": "majority_vote"}, {"function": "take_first"}]},
    {"name": "map-empty", "filter": [{"function": "map", "default_value": "x"}, {"function": "uppercase"}]}],
    "metric_list": [{"metric": "exact_match", "ignore_case": True, "ignore_punctuation": True}]}
CHOICES = [["Paris", "London", " Rome. ", "New York"], ["Z\u00fcrich", "\u03a9mega!", "\u0130stanbul", "the end"],
           ["yes", "no"], ["(A)", "a.b*c", "", "x|y"]]
choice_texts = []
for t in ["The answer is (B).", "I think it's london!", "Answer: C", "paris, or rome.", "nothing at all",
          "The answer is Rome", "answer:   D and (A) (C)", "z\u00fcrich \u03c9mega", "\u03a9MEGA",
          "istanbul", "the End", "answer is b", "  (A) and a.b*c", "x|y?", "The answer is (A)",
          "ANSWER IS  x", "answer:\nB"]:
    for ch in CHOICES:
        for target in ["(B)", "(A)", "no", "yes"]:
            choice_texts.append({"text": t, "target": target, "choices": ch})
tt.write(os.path.join(work, "choice-texts.json"), json.dumps(choice_texts))
for name, settings, texts_file in (("gsm8k", GSM8K, "texts.json"), ("plain", PLAIN, "texts.json"),
                                   ("choice", CHOICE, "choice-texts.json")):
    texts = json.load(open(os.path.join(work, texts_file)))
    f = tt.write(os.path.join(work, f"{name}.json"), json.dumps(settings))
    rc, got, err = run_tool("filter", f, os.path.join(work, texts_file))
    check(f"{name} settings: exit 0, a line each", rc == 0 and len(got) == len(texts), f"{rc} {got[:1]} {err}")
    opts = settings["metric_list"][0]
    for case, res in zip(texts, got):
        filtered = [harness_pipeline(fl["filter"], case["text"], settings.get("repeats", 1),
                                     case.get("choices")) for fl in settings["filter_list"]]
        exact = [harness_exact(case["text"], case["target"], opts)] + \
                [harness_exact(x, case["target"], opts) for x in filtered]
        check(f"{name}: {case['text'][:30]!r} / {case['target']!r}: filtered texts and exact_match "
              "as the harness's", res == {"filtered": filtered, "exact": exact},
              f"got {res}, harness {filtered} {exact}")

# ---- refused settings: exit 2 naming the problem ----
BAD = [({"filter_list": [{"name": "x", "filter": [{"function": "fallback_regex"}]}]}, "fallback_regex"),
       ({"filter_list": [{"name": "x", "filter": [{"function": "take_first_k", "k": 2}]}]}, "repeats"),
       ({"repeats": 2, "filter_list": [{"name": "x", "filter": [{"function": "take_first_k"}]}]}, "\"k\""),
       ({"repeats": 0}, "repeats"), ({"repeats": "3"}, "repeats"),
       ({"generation_kwargs": {"do_sample": True, "temperature": 0.7}}, "do_sample"),
       ({"filter_list": [{"name": "x", "filter": [{"function": "majority_vote", "k": 1}]}]}, "\"k\""),
       ({"filter_list": [{"name": "x", "filter": [{"function": "map", "mapping_dict": {"A": 1},
                                                    "default_value": "x"}]}]}, "mapping_dict[\"A\"]"),
       ({"filter_list": [{"name": "x", "filter": [{"function": "map", "mapping_dict": {"A": "1"}}]}]},
        "default_value"),
       ({"filter_list": [{"name": "x", "filter": [{"function": "map", "mapping_dict": ["A"],
                                                    "default_value": "x"}]}]}, "mapping_dict"),
       ({"filter_list": [{"name": "x", "filter": [{"function": "multi_choice_regex", "ignore_case": 1}]}]},
        "ignore_case"),
       ({"filter_list": [{"name": "x", "filter": [{"function": "multi_choice_regex",
                                                    "regexes_to_ignore": ["(?<=a*)"]}]}]}, "(?<=a*)"),
       ({"filter_list": [{"name": "x", "filter": [{"function": "multi_choice_regex", "ignore_numbers": True}]}]},
        "ignore_numbers"),
       ({"filter_list": [{"name": "x", "filter": [{"function": "regex", "regex_pattern": "(?<=a+)b"}]}]},
        "(?<=a+)b"),
       ({"filter_list": [{"name": "x", "filter": [{"function": "regex", "pattern": "a"}]}]}, "pattern"),
       ({"filter_list": [{"name": "x", "filter": [{"function": "lowercase", "x": 1}]}]}, "\"x\""),
       ({"filter_list": [{"name": "x", "filter": [{"function": "regex", "group_select": "1"}]}]},
        "group_select"),
       ({"filter_list": [{"name": "x", "filter": []}, {"name": "x", "filter": []}]}, "two filters"),
       ({"filter_list": [{"filter": []}]}, "name"),
       ({"filter_list": {"name": "x"}}, "filter_list"),
       ({"metric_list": [{"metric": "bleu"}]}, "bleu"),
       ({"metric_list": [{"metric": "exact_match", "ignore_case": "yes"}]}, "ignore_case"),
       ({"metric_list": [{"metric": "exact_match", "regexes_to_ignore": ["(a"]}]}, "(a"),
       ({"metric_list": [{"metric": "exact_match", "ignorecase": True}]}, "ignorecase"),
       ({"metric_list": [{"metric": "exact_match", "aggregation": "median"}]}, "aggregation")]
for k, (settings, needle) in enumerate(BAD):
    f = tt.write(os.path.join(work, f"bad{k}.json"), json.dumps(settings))
    rc, got, err = run_tool("filter", f, os.path.join(work, "texts.json"))
    msg = got[0].get("error", "") if got else ""
    check(f"settings {json.dumps(settings)[:70]}: refused (exit 2) naming {needle!r}",
          rc == 2 and needle in msg and f in msg, (rc, msg))
# multi_choice_regex without the request's choices: an error naming them
rc, got, err = run_tool("filter", os.path.join(work, "choice.json"), os.path.join(work, "texts.json"))
check("multi_choice_regex on a text without its request's choices: an error naming \"choices\"",
      rc == 0 and got and all("choices" in x.get("error", "") for x in got), got[:1])
tt.finish("eval-filters: all checks passed")
