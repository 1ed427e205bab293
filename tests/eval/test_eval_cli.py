#!/usr/bin/python3
"""`trident eval` end to end, torch-free: a small byte-level model trained for 60 iterations on a
generated corpus and saved; then
  - --input: the perplexity of two files is the same on 1, 2 and 4 tensor-parallel ranks
    (nll_sum 1e-5 relative, tokens and windows equal), and on 2, 4 and 3 ranks as 2, 2 and 3
    --data-parallel replicas (each file's too; --data-parallel 3 of 2 ranks refused); a file of N <= C bytes: N - 1 tokens in
    one window; tokens and windows = what the spec's loop gives (computed here) for several
    --context / --stride; bytes = the files' sizes; nll_mean, perplexity and bits_per_byte
    follow from nll_sum; two files = each alone added up (and "files" gives each one's),
    --limit 1 = the first alone, an
    empty and a one-byte file score nothing;
  - the window arithmetic by hand: for every (--context, --stride) the nll_sum of a file with no
    whitespace equals minus the summed log-likelihoods of one --tasks request per window
    (context = the window's unscored bytes, continuation = its scored ones), so the model reads
    exactly the windows of the recipe and scores exactly their new tokens;
  - --data-path on the training data with --context = seq_length: tokens = samples x C (the
    samples (tokens - 1) / C of the split, counted here from the .idx), a loss near the
    training's last ones (within a factor 1.5), bytes null; --split 90,10,0 --split-name valid
    counts the last tenth of the documents; the same on 2 ranks, and on 2 replicas;
  - --tasks: continuation and multiple-choice lines (blank lines skipped, line numbers kept):
    tokens per continuation (bytes), the whitespace move (ASCII spaces, U+00A0, U+3000, U+001F:
    Python's str.isspace) seen in the token counts and in equal log-likelihoods, left truncation
    (a long context = its last C + 1 - k bytes), a continuation of exactly C tokens, pred =
    argmax, pred_norm = argmax of ll / code points, acc / acc_norm / greedy_accuracy / nll_mean
    from the results, a choice's ll = the same continuation line's, greedy = whether `trident
    generate --temperature 0` gives the continuation, --limit, CRLF line ends, 2 ranks = 1 =
    2 and 2x2 data-parallel replicas,
    two task files (each one's counts, results in file order);
    pred_norm divides by code points (two choices ordered otherwise per byte), ties go to the
    first choice;
  - text output: the perplexity, loglikelihood and multiple choice lines;
  - every refusal of the spec's list (exit 2, `FILE:LINE` and a word naming the problem) and bad
    usage (no input, two input kinds, --stride > --context, --stride with --data-path,
    --context beyond the positions, a missing file, no checkpoint folder, ...): exit 2 with a
    message starting `trident eval: `, never a crash.
usage: test_eval_cli.py TRIDENT WORKDIR"""
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
from trident_test import check  # noqa: E402

trident, work = sys.argv[1], tt.fresh_dir(sys.argv[2])
words = ["alpha", "beta", "gamma", "delta", "pipe", "rank", "token", "cache"]
prefix = tt.make_corpus(trident, work, 11, words, 300, 4, 30)
ckpt = os.path.join(work, "ckpt")
T, P = 32, 96  # seq_length, max_position_embeddings (the default --context)
config = tt.write_config(os.path.join(work, "small.yaml"),
    model=dict(num_layers=2, hidden_size=64, num_attention_heads=4, seq_length=T,
               max_position_embeddings=P, vocab_size=256),
    training=dict(micro_batch_size=4, global_batch_size=8, train_iters=60, lr=3.0e-3),
    data=dict(data_path=prefix, split="100,0,0"),
    checkpoint=dict(save=ckpt))
run_dir = os.path.join(work, "run")
r = tt.run(tt.train_cmd(trident, config, run_dir, flags=["--quiet"]), timeout=300)
if not check("training the model exits 0", r.returncode == 0, r.stderr[-2000:]):
    tt.finish()


def path(name):
    return os.path.join(work, name)


def evaluate(*args, nproc=1, where=ckpt, timeout=300):
    cmd = [trident, "eval", where, *args] + (["--nproc", str(nproc)] if nproc > 1 else [])
    return tt.run(cmd, timeout=timeout)


def parse(stdout):
    """The JSON object of --json's stdout (rank prefixes such as '[r0] ' dropped)."""
    try:
        return json.loads(stdout)
    except ValueError:
        pass
    for line in stdout.splitlines():
        line = line[line.index("{"):] if "{" in line else ""
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def result(what, *args, nproc=1, where=ckpt):
    """The --json object of `trident eval`, or None after a failed check named WHAT."""
    r = evaluate("--json", *args, nproc=nproc, where=where)
    got = parse(r.stdout) if r.returncode == 0 else None
    if not check(f"{what}: exit 0 and one JSON object", isinstance(got, dict),
                 f"exit {r.returncode}: {r.stdout[-600:]!r} {r.stderr[-1200:]!r}"):
        return None
    return got


def windows(n, context, stride):
    """The spec's loop: [(begin, first scored, end)] of a stream of n tokens."""
    out, prev_end = [], 0
    for begin in range(0, n, stride):
        end = min(begin + context, n)
        out.append((begin, max(begin + 1, prev_end), end))
        prev_end = end
        if end == n:
            break
    return out


def scored(n, context, stride):
    """(tokens scored, windows) of a stream of n tokens by the spec's loop."""
    w = windows(n, context, stride)
    return sum(e - s for _, s, e in w), len(w)


def close(a, b, rel):
    """a and b are numbers within rel of the larger."""
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
        abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def ppl(got):
    return (got or {}).get("perplexity") or {}


def refused(r, *needles):
    """Exit 2, a `trident eval: ` message holding every needle (case-insensitive; a tuple: one
    of its words); never a crash."""
    err = r.stderr.lower()
    return r.returncode == 2 and "trident eval: " in r.stderr and \
        all(any(w.lower() in err for w in ((n,) if isinstance(n, str) else n)) for n in needles)


def how(r):
    crash = " (a crash)" if r.returncode < 0 or r.returncode in (134, 139) else ""
    return f"exit {r.returncode}{crash}: {r.stderr[-600:]!r}"


# ---- --input ----
text_a = tt.write_corpus(path("a.txt"), 21, words, 40, 4, 30)
text_b = tt.write(path("b.txt"),
                  "gamma delta. Caf\u00e9 cr\u00e8me, na\u00efve \u65e5\u672c\n" * 12)
empty = tt.write(path("empty.txt"), b"")
one = tt.write(path("one.txt"), b"x")
na, nb = os.path.getsize(text_a), os.path.getsize(text_b)
both = result("--input a.txt b.txt", "--input", text_a, text_b)
p = ppl(both)
if both:
    check("--input: context and stride default to max_position_embeddings",
          both.get("context") == P and both.get("stride") == P,
          {k: both.get(k) for k in ("context", "stride")})
    check("--input: the checkpoint's iteration (60)", both.get("iteration") == 60,
          both.get("iteration"))
    want_t, want_w = (x + y for x, y in zip(scored(na, P, P), scored(nb, P, P)))
    check("--input of 2 files: 2 streams, the loop's tokens (a window's first token unscored when "
          "windows do not overlap) and windows, the files' bytes",
          p.get("streams") == 2 and p.get("tokens") == want_t and p.get("windows") == want_w
          and p.get("bytes") == na + nb,
          f"got {p}; want tokens {want_t}, windows {want_w}, bytes {na + nb}")
    nll, n_tok = p.get("nll_sum", float("nan")), max(p.get("tokens", 1), 1)
    check("--input: nll_mean = nll_sum / tokens, perplexity = exp(nll_mean), bits_per_byte = "
          "nll_sum / (bytes ln 2)", close(p.get("nll_mean"), nll / n_tok, 1e-6)
          and close(p.get("perplexity"), math.exp(nll / n_tok), 1e-6)
          and close(p.get("bits_per_byte"), nll / ((na + nb) * math.log(2)), 1e-6), p)
    check("--input: the trained model does better than chance (nll_mean < ln 256 / 2)",
          0 < p.get("nll_mean", 99) < math.log(256) / 2, p)
    for n, dp in ((2, 2), (4, 2), (3, 3)):
        q = ppl(result(f"--input a.txt b.txt --nproc {n} --data-parallel {dp}", "--input", text_a,
                       text_b, "--data-parallel", str(dp), nproc=n))
        check(f"--input on {n} ranks as {dp} data-parallel replicas = on 1 (nll_sum 1e-5, tokens, "
              "windows, streams)", close(q.get("nll_sum"), nll, 1e-5) and
              all(q.get(k) == p.get(k) for k in ("tokens", "windows", "streams", "bytes")) and
              [f.get("tokens") for f in q.get("files", [])] == [f.get("tokens") for f in p.get("files", [])],
              f"{q} vs {p}")
    r = evaluate("--input", text_a, "--data-parallel", "3", nproc=2)
    check("--data-parallel 3 of 2 ranks: exit 2 naming it", refused(r, "--data-parallel 3"), how(r))
    for n in (2, 4):
        q = ppl(result(f"--input a.txt b.txt --nproc {n}", "--input", text_a, text_b, nproc=n))
        check(f"--input on {n} tensor-parallel ranks = on 1 (nll_sum 1e-5 relative, tokens, "
              "windows)", close(q.get("nll_sum"), nll, 1e-5) and q.get("tokens") == p.get("tokens")
              and q.get("windows") == p.get("windows"), f"{q} vs {p}")
    pa = ppl(result("--input a.txt", "--input", text_a))
    pb = ppl(result("--input b.txt", "--input", text_b))
    check("--input a b = a alone + b alone (nll_sum, tokens, windows, bytes)",
          close(pa.get("nll_sum", 0) + pb.get("nll_sum", 0), nll, 1e-6)
          and all(pa.get(k, 0) + pb.get(k, 0) == p.get(k) for k in ("tokens", "windows", "bytes")),
          f"{pa} + {pb} vs {p}")
    files = p.get("files") or []
    check("--input a b: each file's figures = each alone (path, nll_sum, tokens, bytes)",
          len(files) == 2 and [f.get("path") for f in files] == [text_a, text_b]
          and all(close(f.get("nll_sum"), q.get("nll_sum"), 1e-9) and f.get("tokens") == q.get("tokens")
                  and f.get("bytes") == q.get("bytes") for f, q in zip(files, (pa, pb))), files)
    pl = ppl(result("--input a.txt --input b.txt --limit 1", "--input", text_a, "--input", text_b,
                    "--limit", "1"))
    check("--input given twice with --limit 1 = the first file alone",
          pl.get("streams") == 1 and pl.get("tokens") == pa.get("tokens")
          and close(pl.get("nll_sum"), pa.get("nll_sum"), 1e-6), f"{pl} vs {pa}")
    short = tt.write(path("short.txt"), "alpha beta gamma delta pipe rank token cache\n")
    ps = ppl(result("--input short.txt", "--input", short))
    check("a file of N = 45 <= C bytes: N - 1 tokens in one window",
          ps.get("tokens") == 44 and ps.get("windows") == 1 and ps.get("bytes") == 45, ps)
    for order in ((text_a, empty, one), (empty, one, text_a)):
        names = " ".join(os.path.basename(x) for x in order)
        pe = ppl(result(f"--input {names}", "--input", *order))
        check(f"--input {names}: the empty and the one-byte file score nothing (the tokens and "
              "nll_sum of a.txt alone; their bytes counted)",
              pe.get("streams") == 3 and pe.get("tokens") == pa.get("tokens")
              and close(pe.get("nll_sum"), pa.get("nll_sum"), 1e-6) and pe.get("bytes") == na + 1,
              f"{pe} vs {pa}")
    for name, f in (("empty.txt", empty), ("one.txt", one)):
        pz = ppl(result(f"--input {name} alone", "--input", f))
        check(f"--input {name} alone: 1 stream, 0 tokens, nll_mean and perplexity null",
              pz.get("streams") == 1 and pz.get("tokens") == 0 and pz.get("nll_sum") == 0
              and pz.get("nll_mean") is None and pz.get("perplexity") is None, pz)
    r = evaluate("--input", text_a, text_b)
    line = [x for x in r.stdout.splitlines() if x.startswith("perplexity:")]
    check("text output: 'trident eval: iteration 60 of DIR, context 96, stride 96', then a "
          "'perplexity:' line with the streams and tokens", r.returncode == 0
          and r.stdout.startswith(f"trident eval: iteration 60 of {ckpt}, context {P}, stride {P}")
          and line and "2 streams" in line[0] and f"{want_t} tokens" in line[0],
          f"exit {r.returncode}: {r.stdout!r} {r.stderr[-500:]!r}")

# ---- the window arithmetic by hand: each window as a --tasks request ----
# a text with no whitespace (no context's end moves into its continuation), ASCII (every byte
# slice is a string); the request reads the window but its last token, the same logits
src = open(tt.write_corpus(path("w-src.txt"), 5, words, 1, 60, 60)).read()
wtext = src.strip().replace(" ", ".")
wfile = tt.write(path("w.txt"), wtext)
N = len(wtext)
for C, S in ((P, P), (P, P // 2), (P, 7), (40, 40), (40, 13), (17, 1)):
    got = result(f"--input w.txt --context {C} --stride {S}", "--input", wfile, "--context", str(C),
                 "--stride", str(S))
    if not got:
        continue
    wins = windows(N, C, S)
    n_scored = scored(N, C, S)[0]
    g = ppl(got)
    check(f"--context {C} --stride {S} on {N} bytes: context and stride reported, the loop's "
          f"{n_scored} tokens and {len(wins)} windows",
          got.get("context") == C and got.get("stride") == S and g.get("tokens") == n_scored
          and g.get("windows") == len(wins), f"{got}")
    tasks = tt.write(path(f"w-{C}-{S}.jsonl"), "".join(
        json.dumps({"context": wtext[b:s], "continuation": wtext[s:e]}) + "\n" for b, s, e in wins))
    t = result(f"the {len(wins)} windows as --tasks --context {C}", "--tasks", tasks,
               "--context", str(C))
    if t:
        lls = [x["loglikelihood"][0] for x in t["tasks"]["results"]]
        n_t = t["tasks"]["loglikelihood"]["tokens"]
        check(f"--context {C} --stride {S}: nll_sum = -(sum of the windows' loglikelihoods as "
              f"requests) (1e-4 relative), tokens = their tokens",
              close(-sum(lls), g.get("nll_sum"), 1e-4) and n_t == n_scored,
              f"nll_sum {g.get('nll_sum')} vs {-sum(lls)}; tokens {n_t}")


# ---- --data-path ----
def idx_docs(prefix):
    """Tokens per document of a Megatron .idx (each document one sequence or more)."""
    with open(prefix + ".idx", "rb") as f:
        raw = f.read()
    n_seq, n_doc = struct.unpack_from("<QQ", raw, 18)
    sizes = struct.unpack_from(f"<{n_seq}i", raw, 34)
    docs = struct.unpack_from(f"<{n_doc}q", raw, 34 + 12 * n_seq)
    return [sum(sizes[docs[k]:docs[k + 1]]) for k in range(n_doc - 1)]


docs = idx_docs(prefix)
last = tt.losses(run_dir)[-5:]
d = result(f"--data-path --context {T}", "--data-path", prefix, "--context", str(T))
if d:
    dp = ppl(d)
    samples = (sum(docs) - 1) // T
    check(f"--data-path: tokens = samples x C ({samples} x {T}), bytes and bits_per_byte null",
          dp.get("tokens") == samples * T and dp.get("bytes") is None
          and dp.get("bits_per_byte") is None, dp)
    mean = sum(last) / len(last)
    check("--data-path: the loss is near the training's last losses (within a factor 1.5)",
          mean / 1.5 <= dp.get("nll_mean", -1) <= mean * 1.5,
          f"eval {dp.get('nll_mean')} training {last}")
    dd = ppl(result("--data-path on 2 ranks as 2 replicas", "--data-path", prefix, "--context",
                    str(T), "--data-parallel", "2", nproc=2))
    check("--data-path on 2 data-parallel replicas = on 1 (nll_sum 1e-9, tokens, samples)",
          close(dd.get("nll_sum"), dp.get("nll_sum"), 1e-9) and dd.get("tokens") == dp.get("tokens")
          and dd.get("streams") == dp.get("streams"), f"{dd} vs {dp}")
    d2 = ppl(result("--data-path on 2 ranks", "--data-path", prefix, "--context", str(T), nproc=2))
    check("--data-path on 2 ranks = on 1", close(d2.get("nll_sum"), dp.get("nll_sum"), 1e-5)
          and d2.get("tokens") == dp.get("tokens"), f"{d2} vs {dp}")
    v = ppl(result("--data-path --split 90,10,0 --split-name valid", "--data-path", prefix,
                   "--context", str(T), "--split", "90,10,0", "--split-name", "valid"))
    k = round(len(docs) * 0.9)  # 270 of 300: no rounding tie
    vs = (sum(docs[k:]) - 1) // T
    check(f"--split 90,10,0 --split-name valid: the last {len(docs) - k} documents' {vs} samples",
          v.get("tokens") == vs * T and close(v.get("nll_mean"), dp.get("nll_mean"), 0.3), v)

# ---- --tasks ----
r = tt.run([trident, "generate", ckpt, "--prompt", "alpha beta", "--max-new-tokens", "8",
            "--temperature", "0", "--json"], timeout=120)
try:
    greedy_text = bytes(json.loads(r.stdout)["generated_ids"]).decode("ascii")
except (ValueError, KeyError, UnicodeDecodeError, TypeError):
    check("trident generate's greedy continuation of 'alpha beta' (8 ASCII bytes)", False,
          f"exit {r.returncode}: {r.stdout[-300:]!r} {r.stderr[-300:]!r}")
    greedy_text = " gamma d"
wrong = greedy_text[:-1] + ("a" if greedy_text[-1] != "a" else "b")
long_ctx = " ".join(words * 6)  # 269 bytes: beyond C = 96
k_long = len(" gamma")
lines = [
    {"context": "alpha beta", "continuation": " gamma"},                                  # 1
    None,                                                                                 # 2
    {"context": "alpha beta ", "continuation": "gamma"},                                  # 3
    {"context": "pipe rank", "choices": [" token", " cache", " alpha beta"], "label": 1}, # 4
    {"context": "abc\u00a0", "continuation": "d"},                                        # 5
    {"context": "abc\u3000", "continuation": "d"},                                        # 6
    {"context": "abc\x1f", "continuation": "d"},                                          # 7
    {"context": long_ctx, "continuation": " gamma"},                                      # 8
    {"context": long_ctx[-(P + 1 - k_long):], "continuation": " gamma"},                  # 9
    {"context": "x", "continuation": "a" * P},                                            # 10
    {"context": "gamma", "choices": [" \u00e9", " delta", " \u00fc\u00fc"], "label": 0,
     "extra": [1]},                                                                       # 11
    {"context": "alpha beta", "continuation": greedy_text},                               # 12
    {"context": "alpha beta", "continuation": wrong},                                     # 13
    {"context": "pipe rank", "continuation": " alpha beta"},                              # 14
    {"context": "delta", "choices": [" rank", " pipe", " gamma gamma"], "label": 2},      # 15
]
tasks = tt.write(path("tasks.jsonl"), "".join((json.dumps(x) if x else "  ") + "\n" for x in lines))
t = result("--tasks", "--tasks", tasks)
if t:
    ts = t.get("tasks") or {}
    res = ts.get("results") or []
    want_lines = [i + 1 for i, x in enumerate(lines) if x]
    check("--tasks: one result per request, in order, with its line number (blank line 2 skipped)",
          ts.get("requests") == len(want_lines) and [x.get("line") for x in res] == want_lines,
          f"{ts.get('requests')} {[x.get('line') for x in res]}")
    by = {x.get("line"): x for x in res}
    toks = {n: x.get("tokens") for n, x in by.items()}
    ll = {n: (x.get("loglikelihood") or [None])[0] for n, x in by.items()}
    check("tokens of continuations: bytes (' gamma' 6, 'a' x 96: 96 = C is allowed)",
          toks.get(1) == [6] and toks.get(10) == [P] and toks.get(4) == [6, 6, 11], toks)
    check("the whitespace move: 'alpha beta ' + 'gamma' = 'alpha beta' + ' gamma' (6 tokens, the "
          "same ll)", toks.get(3) == [6] and close(ll.get(3), ll.get(1), 1e-6),
          f"{by.get(1)} {by.get(3)}")
    check("the whitespace move of U+00A0 (2 bytes + 'd': 3 tokens)", toks.get(5) == [3], by.get(5))
    check("the whitespace move of U+3000 (3 bytes + 'd': 4 tokens)", toks.get(6) == [4], by.get(6))
    check("the whitespace move of U+001F (str.isspace; 1 byte + 'd': 2 tokens)",
          toks.get(7) == [2], by.get(7))
    check(f"left truncation: a {len(long_ctx)}-byte context reads its last {P + 1 - k_long} "
          "bytes (the same ll as that context)",
          toks.get(8) == [k_long] and close(ll.get(8), ll.get(9), 1e-5), f"{by.get(8)} {by.get(9)}")
    check("a choice's loglikelihood = the same continuation line's (line 4's third, line 14)",
          close((by.get(4, {}).get("loglikelihood") or [0])[-1], ll.get(14), 1e-6),
          f"{by.get(4)} {by.get(14)}")
    check("greedy: true for trident generate's greedy continuation, false with its last byte "
          "changed",
          by.get(12, {}).get("greedy") == [True] and by.get(13, {}).get("greedy") == [False],
          f"{greedy_text!r}: {by.get(12)}; {wrong!r}: {by.get(13)}")
    check("every loglikelihood < 0, finite; greedy flags are booleans",
          all(isinstance(v, float) and -1e4 < v < 0
              for x in res for v in x.get("loglikelihood", [1]))
          and all(isinstance(g, bool) for x in res for g in x.get("greedy", [None])), res)
    mc = [(i + 1, x) for i, x in enumerate(lines) if x and "choices" in x]
    cont = [(i + 1, x) for i, x in enumerate(lines) if x and "continuation" in x]
    for n, x in mc:
        got = by.get(n, {})
        lls = got.get("loglikelihood") or [0]
        pred = max(range(len(lls)), key=lambda i: (lls[i], -i))
        norm = [v / len(c) for v, c in zip(lls, x["choices"])]
        pred_norm = max(range(len(norm)), key=lambda i: (norm[i], -i))
        check(f"line {n}: label, pred = argmax ll, pred_norm = argmax ll / code points",
              got.get("label") == x["label"] and got.get("pred") == pred
              and got.get("pred_norm") == pred_norm and len(lls) == len(x["choices"])
              and len(got.get("greedy", [])) == len(lls), got)
    check("continuation lines: one value each, no label / pred / pred_norm",
          all(len(by.get(n, {}).get("loglikelihood", [])) == 1
              and len(by.get(n, {}).get("greedy", [])) == 1
              and not {"label", "pred", "pred_norm"} & set(by.get(n, {})) for n, _ in cont),
          [by.get(n) for n, _ in cont])
    m = ts.get("multiple_choice") or {}
    acc = sum(by.get(n, {}).get("pred") == x["label"] for n, x in mc) / len(mc)
    acc_n = sum(by.get(n, {}).get("pred_norm") == x["label"] for n, x in mc) / len(mc)
    check("multiple_choice: requests, acc, acc_norm from the results", m.get("requests") == len(mc)
          and close(m.get("acc"), acc, 1e-9) and close(m.get("acc_norm"), acc_n, 1e-9),
          f"{m} vs {acc} {acc_n}")
    lsec = ts.get("loglikelihood") or {}
    ntok = sum((by.get(n, {}).get("tokens") or [0])[0] for n, _ in cont)
    sll = sum(ll.get(n) or 0 for n, _ in cont)
    gacc = sum((by.get(n, {}).get("greedy") or [False])[0] for n, _ in cont) / len(cont)
    check("loglikelihood: requests and tokens of the continuation lines, greedy_accuracy, "
          "nll_mean, perplexity", lsec.get("requests") == len(cont) and lsec.get("tokens") == ntok
          and close(lsec.get("greedy_accuracy"), gacc, 1e-9)
          and close(lsec.get("nll_mean"), -sll / ntok, 1e-6)
          and close(lsec.get("perplexity"), math.exp(-sll / ntok), 1e-6),
          f"{lsec}; tokens {ntok} ll {sll}")
    for n, dp in ((2, 2), (4, 2)):
        td = result(f"--tasks --nproc {n} --data-parallel {dp}", "--tasks", tasks, "--data-parallel",
                    str(dp), nproc=n)
        if td:
            rd = td["tasks"]["results"]
            check(f"--tasks on {n} ranks as {dp} data-parallel replicas = on 1 (each request's "
                  "ll 1e-5, greedy, pred; acc)", len(rd) == len(res) and all(
                      all(close(u, v, 1e-5) for u, v in zip(x["loglikelihood"], y["loglikelihood"]))
                      and x.get("greedy") == y.get("greedy") and x.get("pred") == y.get("pred")
                      for x, y in zip(rd, res)) and td["tasks"]["multiple_choice"] == ts.get("multiple_choice"),
                  f"{rd} vs {res}")
    t2 = result("--tasks --nproc 2", "--tasks", tasks, nproc=2)
    if t2:
        r2 = t2["tasks"]["results"]
        check("--tasks on 2 tensor-parallel ranks = on 1 (ll 1e-5 relative, greedy, pred)",
              len(r2) == len(res) and all(
                  all(close(u, v, 1e-5) for u, v in zip(x["loglikelihood"], y["loglikelihood"]))
                  and x.get("greedy") == y.get("greedy") and x.get("pred") == y.get("pred")
                  for x, y in zip(r2, res)), f"{r2} vs {res}")
    crlf = tt.write(path("tasks-crlf.jsonl"), open(tasks).read().replace("\n", "\r\n"))
    tc = result("--tasks with CRLF line ends", "--tasks", crlf)
    if tc:
        def key(results):
            return [(x.get("line"), x.get("tokens"), x.get("loglikelihood")) for x in results]
        check("--tasks with CRLF line ends = with LF (lines, tokens, loglikelihoods)",
              key(tc["tasks"]["results"]) == key(res), tc["tasks"]["results"])
    two = result("--tasks FILE FILE", "--tasks", tasks, crlf)
    if two:
        t = two["tasks"]
        per = t.get("files") or []
        check("--tasks of two files: results of file 0 then file 1, each file's counts, all = "
              "their sum", [x.get("file") for x in t["results"]] == [0] * len(res) + [1] * len(res)
              and len(per) == 2 and per[0].get("path") == tasks and per[1].get("path") == crlf
              and t.get("requests") == 2 * len(res)
              and t["multiple_choice"].get("requests") == 2 * per[0]["multiple_choice"]["requests"]
              and close(t["multiple_choice"].get("acc"), per[0]["multiple_choice"].get("acc"), 1e-12)
              and all(close(u, v, 1e-9) for x, y in zip(t["results"][len(res):], res)
                      for u, v in zip(x["loglikelihood"], y["loglikelihood"])), t.get("files"))
    tl = result("--tasks --limit 2", "--tasks", tasks, "--limit", "2")
    if tl:
        check("--tasks --limit 2: the first 2 requests (lines 1 and 3)",
              [x.get("line") for x in tl["tasks"]["results"]] == [1, 3]
              and tl["tasks"].get("requests") == 2, tl["tasks"])
    only = result("--tasks of a continuation line only", "--tasks",
                  tt.write(path("cont.jsonl"), json.dumps(lines[0])))
    if only:
        m = only["tasks"].get("multiple_choice") or {}
        check("a section with 0 requests: counts 0, ratios null",
              m.get("requests") == 0 and m.get("acc") is None and m.get("acc_norm") is None,
              only["tasks"])
# pred_norm divides by code points, not bytes: two choices whose order differs between the two
# (found among candidates from their log-likelihoods as continuation lines); ties go to the first
cands = [" caf\u00e9", " cafe", " \u00e9", " zqxj", " \u00fc", " qq", " \u65e5", " \u00f1and\u00fa",
         " gamm\u00e4", " ab", " \u00e9\u00e9", " x"]
c = result("candidate choices as continuation lines", "--tasks",
           tt.write(path("cands.jsonl"), "".join(
               json.dumps({"context": "gamma", "continuation": x}) + "\n" for x in cands)))
cll = [x["loglikelihood"][0] for x in c["tasks"]["results"]] if c else []
pairs = [(cands[i], cands[j], cll[i], cll[j])
         for i in range(len(cll)) for j in range(i + 1, len(cll))
         if (cll[i] / len(cands[i]) > cll[j] / len(cands[j]))
         != (cll[i] / len(cands[i].encode()) > cll[j] / len(cands[j].encode()))]
if c and check("(two candidate choices ordered differently per code point and per byte)", pairs,
               list(zip(cands, cll))):
    x, y, lx, ly = pairs[0]
    want = 0 if lx / len(x) > ly / len(y) else 1
    norm = tt.write(path("norm.jsonl"), "".join(json.dumps(line) + "\n" for line in (
        {"context": "gamma", "choices": [x, y], "label": 0},
        {"context": "gamma", "choices": [" delta", " delta"], "label": 1})))
    mc = result("--tasks: a multiple-choice line of those two, and one of a choice twice",
                "--tasks", norm)
    if mc:
        r0, r1 = mc["tasks"]["results"]
        check(f"pred_norm divides by code points ({x!r}: {lx:.3f} / {len(x)}, {y!r}: {ly:.3f} / "
              f"{len(y)}), not bytes: pred_norm {want}", r0.get("pred_norm") == want
              and close(r0["loglikelihood"][0], lx, 1e-6)
              and close(r0["loglikelihood"][1], ly, 1e-6), r0)
        check("a tie (the same choice twice): pred and pred_norm are the first",
              r1["loglikelihood"][0] == r1["loglikelihood"][1] and r1.get("pred") == 0
              and r1.get("pred_norm") == 0, r1)

r = evaluate("--tasks", tasks)
out = r.stdout.splitlines()
check("text output: 'loglikelihood:' and 'multiple choice:' lines", r.returncode == 0
      and any(x.startswith("loglikelihood:") and "requests" in x for x in out)
      and any(x.startswith("multiple choice:") and "acc" in x for x in out),
      f"exit {r.returncode}: {r.stdout!r} {r.stderr[-500:]!r}")

# ---- refused task lines: exit 2, FILE:LINE and a word naming the problem ----
good = json.dumps(lines[0])
ab = ["b", "c"]
bad_lines = [
    ('{"context": "a", ', "json", "not JSON"),
    ([1, 2], "object", "not an object"),
    ({"continuation": "a"}, "context", "no context"),
    ({"context": 5, "continuation": "a"}, "context", "a non-string context"),
    ({"context": "", "continuation": "a"}, "context", "an empty context"),
    ({"context": " \t ", "continuation": "a"}, "context",
     "a context of whitespace (empty once moved)"),
    ({"context": "a"}, "continuation", "neither continuation nor choices"),
    ({"context": "a", "continuation": "b", "choices": ["c"], "label": 0}, "continuation",
     "both continuation and choices"),
    ({"context": "a", "choices": ["b", 3], "label": 0}, "choice", "a non-string choice"),
    ({"context": "a", "choices": [], "label": 0}, "choices", "an empty choices list"),
    ({"context": "a", "choices": "b", "label": 0}, "choices", "choices not a list"),
    ({"context": "a", "choices": ab}, "label", "no label"),
    ({"context": "a", "choices": ab, "label": "0"}, "label", "a string label"),
    ({"context": "a", "choices": ab, "label": 1.5}, "label", "a fractional label"),
    ({"context": "a", "choices": ab, "label": 2}, "label", "a label past the choices"),
    ({"context": "a", "choices": ab, "label": -1}, "label", "a negative label"),
    ({"context": "a", "continuation": ""}, ("token", "empty"), "a continuation with no tokens"),
    ({"context": "a", "choices": ["b", ""], "label": 0}, ("token", "empty"),
     "a choice with no tokens"),
    ({"context": "a", "continuation": "b" * (P + 1)}, str(P),
     f"a continuation of C + 1 = {P + 1} tokens"),
    ({"context": "a", "until": 5}, "until", "generation: until not a list"),
    ({"context": "a", "until": ["b", 3]}, "until", "generation: a stop string not a string"),
    ({"context": "a", "until": ["b", ""]}, "empty", "generation: an empty stop string"),
    ({"context": "a", "until": [], "max_gen_toks": 0}, "max_gen_toks", "generation: max_gen_toks 0"),
    ({"context": "a", "until": [], "max_gen_toks": P}, "max_gen_toks",
     "generation: max_gen_toks of the whole context"),
    ({"context": "a", "until": [], "max_gen_toks": "5"}, "max_gen_toks",
     "generation: max_gen_toks a string"),
    ({"context": "a", "until": [], "target": 3}, "target", "generation: a target not a string"),
    ({"context": "a", "until": [], "continuation": "b"}, "until",
     "generation: until with a continuation"),
    ({"context": "", "max_gen_toks": 4}, "context", "generation: an empty context"),
]
for k, (bad, word, what) in enumerate(bad_lines):
    bad = bad if isinstance(bad, str) else json.dumps(bad)
    f = tt.write(path(f"bad-{k}.jsonl"), f"{good}\n\n{bad}\n{good}\n")
    r = evaluate("--tasks", f)
    check(f"--tasks, {what} on line 3: exit 2, '{os.path.basename(f)}:3' and {word!r}",
          refused(r, f"{os.path.basename(f)}:3", word), how(r))
f = tt.write(path("bad-40.jsonl"),
             good + "\n" + json.dumps({"context": "x", "continuation": "b" * 41}))
r = evaluate("--tasks", f, "--context", "40")
check("--tasks --context 40: a continuation of 41 tokens on line 2 is refused (exit 2, FILE:2)",
      refused(r, f"{os.path.basename(f)}:2"), how(r))
# generation requests beside loglikelihood ones (the bytes tokenizer: a byte a token): the
# summary's counts, each line's text within its max_gen_toks, a target equal to its own text
gen_lines = [{"context": "alpha beta", "until": [], "max_gen_toks": 7},
             {"context": "gamma", "until": "\n", "max_gen_toks": 3, "target": "nothing like it"},
             lines[0]]
gen_tasks = tt.write(path("gen.jsonl"), "".join(json.dumps(x) + "\n" for x in gen_lines))
r = evaluate("--tasks", gen_tasks, "--json")
got = parse(r.stdout) if r.returncode == 0 else None
res = (got or {}).get("tasks", {}).get("results", [])
summary = (got or {}).get("tasks", {}).get("generate_until", {})
check("--tasks with generation lines: exit 0, two generations of at most 7 and 3 tokens, one "
      "loglikelihood result", r.returncode == 0 and len(res) == 3 and
      0 < res[0].get("generated_tokens", 0) <= 7 and 0 < res[1].get("generated_tokens", 0) <= 3 and
      "\n" not in res[1].get("generated", "\n") and "loglikelihood" in res[2] and
      res[1].get("exact_match") is False and "exact_match" not in res[0], how(r) + str(res))
check("--tasks with generation lines: generate_until's summary (2 requests, 1 with a target, "
      "exact_match 0)", summary.get("requests") == 2 and summary.get("with_target") == 1 and
      summary.get("exact_match") == 0, summary)
if res:
    same = tt.write(path("gen-target.jsonl"),
                    json.dumps(dict(gen_lines[0], target=" " + res[0]["generated"] + " \n")) + "\n")
    r = evaluate("--tasks", same)
    check("a target equal to the generated text (padded with whitespace): exact_match 1.0000",
          r.returncode == 0 and "generate_until: 1 requests, 7 tokens generated: exact_match 1.0000"
          in r.stdout, r.stdout + how(r))
# data-parallel generation: the requests split over 2 replicas, gathered in request order,
# the same output as one replica (more lines, so that each replica generates several)
dp_lines = gen_lines + [{"context": w, "until": ["a"], "max_gen_toks": 5 + k % 4, "target": w}
                        for k, w in enumerate(words)]
dp_tasks = tt.write(path("gen-dp.jsonl"), "".join(json.dumps(x) + "\n" for x in dp_lines))


def generations(got):
    """What generation gave: the results without a loglikelihood line's (its scores agree up
    to rounding only), and the summary's generate_until"""
    t = (got or {}).get("tasks", {})
    return ([x for x in t.get("results", []) if "loglikelihood" not in x],
            t.get("generate_until"), [f.get("generate_until") for f in t.get("files", [])])


one = evaluate("--tasks", dp_tasks, "--json")
two = evaluate("--tasks", dp_tasks, "--json", "--data-parallel", "2", nproc=2)
check("generation lines with --nproc 2 --data-parallel 2: exit 0 and the generations, scores "
      "and counts of one replica", one.returncode == 0 and two.returncode == 0 and
      len(generations(parse(one.stdout))[0]) == len(dp_lines) - 1 and
      generations(parse(two.stdout)) == generations(parse(one.stdout)),
      how(two) + one.stdout[-600:] + two.stdout[-600:])
# lm-evaluation-harness's filters: a settings line first (filter_list, metric_list as its task
# YAML writes them); each filter's text and exact_match per request, each filter's score
settings = {"filter_list": [
    {"name": "strict-match", "filter": [{"function": "regex", "regex_pattern": r"([a-z]+) "},
                                        {"function": "take_first"}]},
    {"name": "flexible-extract", "filter": [{"function": "regex", "group_select": -1,
                                             "regex_pattern": r"([a-z]{2,})|(\w)"}]},
    {"name": "upper", "filter": [{"function": "remove_whitespace"}, {"function": "uppercase"}]}],
    "metric_list": [{"metric": "exact_match", "ignore_case": True, "regexes_to_ignore": ["\\$"]}]}
def harness_filter(name, text):
    """the harness's RegexFilter (current upstream), take_first, remove_whitespace, uppercase"""
    import re
    if name == "upper":
        return (text[1:] if text.startswith(" ") else text).upper()
    pattern, select = ((r"([a-z]+) ", 0) if name == "strict-match" else (r"([a-z]{2,})|(\w)", -1))
    found = re.findall(pattern, text)
    if not found:
        return "[invalid]"
    m = found[select]
    if isinstance(m, tuple):
        m = ([x for x in m if x] or ["[invalid]"])[0]
    return m.strip()


# targets that some filters meet: half the lines' the flexible-extract text of one replica's
# generation above, upper case and with a "$" (ignore_case, regexes_to_ignore)
first_gen = [x.get("generated") for x in (parse(one.stdout) or {}).get("tasks", {}).get("results", [])]
filt_lines = [settings] + [dict(line, target="$" + harness_filter("flexible-extract", g).upper())
                           if k % 2 and g is not None else line
                           for k, (line, g) in enumerate(zip(dp_lines, first_gen))]
filt_tasks = tt.write(path("gen-filters.jsonl"), "".join(json.dumps(x) + "\n" for x in filt_lines))
r = evaluate("--tasks", filt_tasks, "--json")
got = parse(r.stdout) if r.returncode == 0 else None
res = (got or {}).get("tasks", {}).get("results", [])
check("a task file with filters: exit 0, a result per request (line numbers after the settings "
      "line)", len(res) == len(dp_lines) and res[0].get("line") == 2, how(r) + str(res[:1]))


want_exact = {}
for line, x in zip(filt_lines[1:], res):
    if "generated" not in x:
        continue
    filtered = x.get("filtered", {})
    for name in ("strict-match", "flexible-extract", "upper"):
        want = harness_filter(name, x["generated"])
        check(f"line {x.get('line')}: filter {name} gives the harness's text",
              filtered.get(name, {}).get("text") == want, (x["generated"], filtered.get(name), want))
        if "target" in line:
            same = want.replace("$", "").lower().strip() == line["target"].replace("$", "").lower().strip()
            want_exact.setdefault(name, []).append(same)
            check(f"line {x.get('line')}: filter {name}'s exact_match (ignore_case)",
                  filtered.get(name, {}).get("exact_match") == same, (filtered.get(name), line["target"]))
summary = (got or {}).get("tasks", {}).get("generate_until", {}).get("filters", {})
check("flexible-extract meets some targets", sum(want_exact.get("flexible-extract", [])) >= 3,
      want_exact)
check("each filter's exact_match in the summary, by name", sorted(summary) ==
      sorted(want_exact) and all(abs(summary[k]["exact_match"] - sum(v) / len(v)) < 1e-8 and
                                 summary[k]["with_target"] == len(v) for k, v in want_exact.items()),
      (summary, want_exact))
r2 = evaluate("--tasks", filt_tasks, "--json", "--data-parallel", "2", nproc=2)
check("filters with --nproc 2 --data-parallel 2: the filtered texts and scores of one replica",
      r2.returncode == 0 and generations(parse(r2.stdout)) == generations(got), how(r2))
r = evaluate("--tasks", filt_tasks)
check("text output: a line per filter", r.returncode == 0 and
      "generate_until, filter strict-match: exact_match" in r.stdout and
      "generate_until, filter upper: exact_match" in r.stdout, r.stdout + how(r))
# multi_choice_regex on each line's "choices" (a never-matching pattern, so the choices decide:
# the first three characters of the line's generation above are choice A), then map and
# majority_vote over repeats
mc_settings = {"repeats": 3, "filter_list": [
    {"name": "mc", "filter": [{"function": "multi_choice_regex", "regex_pattern": "QQQ(\\d)"},
                              {"function": "majority_vote"}]},
    {"name": "mc-map", "filter": [{"function": "multi_choice_regex", "regex_pattern": "QQQ(\\d)"},
                                  {"function": "take_first_k", "k": 2},
                                  {"function": "map", "mapping_dict": {"(A)": "first"},
                                   "default_value": "other"}, {"function": "take_first"}]}]}
mc_lines = [mc_settings] + [dict(line, choices=[g[:3], "zzz", "yyy"]) for line, g in zip(dp_lines, first_gen)
                            if g is not None and g[:3].strip() and "zzz" not in g and "yyy" not in g]
mc_tasks = tt.write(path("gen-mc.jsonl"), "".join(json.dumps(x) + "\n" for x in mc_lines))
r = evaluate("--tasks", mc_tasks, "--json")
res = (parse(r.stdout) or {}).get("tasks", {}).get("results", []) if r.returncode == 0 else []
check(f"multi_choice_regex on the lines' choices ({len(mc_lines) - 1} lines): each text is (A), "
      "mapped to 'first'", len(mc_lines) > 3 and len(res) == len(mc_lines) - 1 and
      all(x.get("filtered", {}).get("mc", {}).get("text") == "(A)" and
          x.get("filtered", {}).get("mc-map", {}).get("text") == "first" for x in res),
      how(r) + str(res[:2]))
for k, (content, needle, what) in enumerate((
        ([mc_settings, dp_lines[0]], "choices", "multi_choice_regex and a line without choices"),
        ([mc_settings, dict(dp_lines[0], choices=[chr(65 + i) for i in range(27)])], "26",
         "27 choices for multi_choice_regex"),
        ([mc_settings, dict(dp_lines[0], choices=["a", 3])], "choices", "a choice not a string"),
        ([settings, dict(dp_lines[0], choices=["a"])], "choices",
         "a generation line's choices without multi_choice_regex"),
        ([dp_lines[0], settings], "first line", "settings after a request"),
        ([settings, settings], "second settings", "two settings lines"),
        ([{"filter_list": [{"name": "x", "filter": [{"function": "regex", "regex_pattern": "(?<=a+)"}]}]},
          dp_lines[0]], "(?<=a+)", "a variable-width lookbehind pattern"),
        ([{"metric_list": [{"metric": "f1"}]}, dp_lines[0]], "f1", "an unknown metric"))):
    f = tt.write(path(f"bad-settings-{k}.jsonl"), "".join(json.dumps(x) + "\n" for x in content))
    r = evaluate("--tasks", f)
    check(f"{what}: refused (exit 2) naming the line and {needle!r}",
          refused(r, os.path.basename(f), needle), how(r))
for name, content in (("empty.jsonl", ""), ("blank.jsonl", "\n  \n\n")):
    f = tt.write(path(name), content)
    r = evaluate("--tasks", f)
    check(f"--tasks of {'an empty file' if not content else 'blank lines only'}: exit 2 naming "
          "the file", refused(r, name), how(r))

# ---- bad usage and bad input: exit 2 and a message naming the problem ----
fresh = tt.fresh_dir(path("no-ckpt"))
cases = [
    ([], "--input", "no input"),
    (["--input", text_a, "--tasks", tasks], "--tasks", "two input kinds (--input and --tasks)"),
    (["--input", text_a, "--data-path", prefix], "--data-path",
     "two input kinds (--input and --data-path)"),
    (["--input", text_a, "--context", "40", "--stride", "41"], "--stride", "--stride > --context"),
    (["--input", text_a, "--stride", "0"], "--stride", "--stride 0"),
    (["--data-path", prefix, "--context", str(T), "--stride", "8"], "--stride",
     "--stride with --data-path"),
    (["--input", text_a, "--context", str(P + 1)], ("--context", "positions"),
     "--context beyond the model's positions"),
    (["--input", text_a, "--context", "0"], "--context", "--context 0"),
    (["--input", path("missing.txt")], "missing.txt", "a missing --input file"),
    (["--tasks", path("missing.jsonl")], "missing.jsonl", "a missing --tasks file"),
    (["--data-path", path("nothing")], "nothing", "a --data-path with no dataset"),
    (["--data-path", prefix, "--split-name", "dev"], "--split-name", "an unknown --split-name"),
    (["--data-path", prefix, "--split", "1,2,3,4"], "split", "a bad --split (four weights)"),
    (["--input", text_a, "--nproc", "3"], "divide", "--nproc 3 of 4 heads"),
    (["--input", text_a, "--bogus"], "--bogus", "an unknown option"),
    (["--input", text_a, "--device", "tpu"], "--device tpu", "an unknown --device"),
]
for args, needle, what in cases:
    r = evaluate(*args)
    check(f"{what}: exit 2 naming {needle!r}", refused(r, needle), how(r))
for where, needle, what in ((path("nowhere"), "nowhere", "a checkpoint folder that does not exist"),
                            (fresh, "no-ckpt", "a folder with no checkpoint")):
    r = evaluate("--input", text_a, where=where)
    check(f"{what}: exit 2 naming it", refused(r, needle), how(r))
r = tt.run([trident, "eval", "--input", text_a], timeout=60)
check("no checkpoint folder given: exit 2", refused(r), how(r))
r = tt.run([trident, "eval", "--help"], timeout=60)
check("--help: exit 0 and the usage", r.returncode == 0 and "usage: trident eval" in r.stdout,
      f"exit {r.returncode}: {r.stdout[-300:]!r}")
tt.finish()
