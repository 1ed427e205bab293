#!/usr/bin/python3
"""Hugging Face transformers as the oracle of the Llama and Bloom families (issue 17). Small
LlamaForCausalLM (4 query heads in 2 key/value groups: GQA; rope, RMSNorm, SwiGLU, untied head),
MistralForCausalLM without a sliding window (imported as a Llama; one process only) and with one
(Mistral-7B v0.1's shape: a window of T of 2T positions, kept as model.sliding_window; one process),
Qwen2ForCausalLM (a Llama with q, k and v biases; GQA, tied head, its window switched off),
BloomForCausalLM (6 heads: ALiBi slopes of a non-power-of-two head count; embedding
LayerNorm), GPTNeoXForCausalLM (Pythia's parallel residual, exact GELU, rotary_pct 0.25,
untied; and the sequential residual, gelu_new, rotary_pct 0.5, tied) and FalconForCausalLM
(Falcon-40B's new_decoder_architecture with 8 heads in 2 key/value groups; Falcon-7B's one
input_layernorm and multi_query with 5 heads; the sequential layer with biases, untied) made
here from configs with random weights (nothing downloaded), saved with
save_pretrained, imported with `trident convert --from hf`; trident's logits match (1e-4
relative to the largest); then trident's loss of iteration 1
and every gradient, in one process and in D2xT2xP2 with sequence parallelism, match
transformers' on the same batch (loss 1e-5 relative, gradients relative L2 1e-4; the
multi_query Falcons in D4xP2: TP must divide the key/value groups); and
`trident convert --to hf --config` of the import is bit-exact to transformers' files and loads
with from_pretrained (no missing or unexpected keys) to the same logits; greedy `trident
generate` of the HF folder and of the import gives transformers' generate's tokens; for the
GPT-NeoX and Falcon folders `trident eval --input` (windows of T, stride T/2) gives
transformers' nll; a Pythia-shaped folder with a tokenizer.json in GPT-NeoX-20B's shape and a
Falcon-7B-shaped one with a tokenizer.json in tiiuae/falcon-7b's: generate --prompt and eval
--input encode text as tokenizers does and continue / score it as transformers does.
usage: test_hf_family_oracle.py TRIDENT HF_PROBE WORKDIR VENV [--quick] [--only=TEXT]
--quick: the one-process run only (the D2xT2xP2 run is the layout matrix's job too).
--only=TEXT: the models whose names hold TEXT alone (e.g. falcon; the tokenizer cases run with
pythia or falcon)."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import trident_test as tt  # noqa: E402
import hf_files as hff  # noqa: E402

trident, probe, work, quick = hff.oracle_start(sys.argv)
only = next((a[len("--only="):] for a in sys.argv[5:] if a.startswith("--only=")), "")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import (AutoModelForCausalLM, BloomConfig, BloomForCausalLM, FalconConfig,  # noqa: E402
                          FalconForCausalLM, GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)

L, V, T = 2, 300, 32  # V: byte tokens fit, and TP pads it


def convert(src, ck):
    rc, out, err = tt.outputs([trident, "convert", "--from", "hf", "--input", src, "--output", ck], timeout=300)
    if not tt.check(f"trident convert --from hf {os.path.basename(src)}", rc == 0, err):
        tt.finish()
    return out


def bloom_grad(G, name):
    top = {"wte": "word_embeddings.weight", "emb_ln.weight": "word_embeddings_layernorm.weight",
           "emb_ln.bias": "word_embeddings_layernorm.bias", "lnf.weight": "ln_f.weight", "lnf.bias": "ln_f.bias"}
    if name in top:
        g = G["transformer." + top[name]]
    else:
        layer, rest = name.split(".", 2)[1:]
        part, kind = rest.rsplit(".", 1)
        hf = {"ln1": "input_layernorm", "qkv": "self_attention.query_key_value", "attn_proj": "self_attention.dense",
              "ln2": "post_attention_layernorm", "fc": "mlp.dense_h_to_4h", "fc_proj": "mlp.dense_4h_to_h"}[part]
        g = G[f"transformer.h.{layer}.{hf}.{kind}"]
    return g.view(-1, 1) if g.dim() == 1 else g


def neox_grad(G, name):
    """transformers' gradient of trident tensor `name` of the GPT-NeoX (every layout trident's)."""
    top = {"wte": "gpt_neox.embed_in.weight", "output_layer": "embed_out.weight",
           "lnf.weight": "gpt_neox.final_layer_norm.weight", "lnf.bias": "gpt_neox.final_layer_norm.bias"}
    if name in top:
        g = G[top[name]]
    else:
        layer, rest = name.split(".", 2)[1:]
        part, kind = rest.rsplit(".", 1)
        hf = {"ln1": "input_layernorm", "qkv": "attention.query_key_value", "attn_proj": "attention.dense",
              "ln2": "post_attention_layernorm", "fc": "mlp.dense_h_to_4h", "fc_proj": "mlp.dense_4h_to_h"}[part]
        g = G[f"gpt_neox.layers.{layer}.{hf}.{kind}"]
    return g.view(-1, 1) if g.dim() == 1 else g


def falcon_grad(G, name, new_arch):
    """transformers' gradient of trident tensor `name` of the Falcon (every layout trident's; the
    norms' names by the architecture)."""
    top = {"wte": "transformer.word_embeddings.weight", "output_layer": "lm_head.weight",
           "lnf.weight": "transformer.ln_f.weight", "lnf.bias": "transformer.ln_f.bias"}
    if name in top:
        g = G[top[name]]
    else:
        layer, rest = name.split(".", 2)[1:]
        part, kind = rest.rsplit(".", 1)
        hf = {"ln1": "ln_attn" if new_arch else "input_layernorm",
              "ln2": "ln_mlp" if new_arch else "post_attention_layernorm",
              "qkv": "self_attention.query_key_value", "attn_proj": "self_attention.dense",
              "fc": "mlp.dense_h_to_4h", "fc_proj": "mlp.dense_4h_to_h"}[part]
        g = G[f"transformer.h.{layer}.{hf}.{kind}"]
    return g.view(-1, 1) if g.dim() == 1 else g


def randomize(model):
    """hf_files.randomize, the families' norms by name (their biases drawn as the weights are)."""
    hff.randomize(model, lambda name: "layernorm" in name or name.endswith("norm.weight") or "ln_f" in name
                  or ".ln_" in name)


prefix = tt.make_corpus(trident, work, 17, ["llama", "bloom", "rotary", "alibi", "group", "query", "head"],
                        300, 5, 50)

families = []
torch.manual_seed(17)
C, NH, NG = 64, 4, 2
llama = LlamaForCausalLM(LlamaConfig(hidden_size=C, intermediate_size=96, num_hidden_layers=L,
                                     num_attention_heads=NH, num_key_value_heads=NG, max_position_embeddings=T,
                                     vocab_size=V, rms_norm_eps=1e-6, rope_theta=10000.0,
                                     tie_word_embeddings=False)).eval()
randomize(llama)
families.append(("llama-gqa", llama, lambda G, n: hff.llama_grad(G, n, NH, NG, C // NH, C),
                 dict(normalization="RMSNorm", position_embedding_type="rope", swiglu=True, ffn_hidden_size=96,
                      num_query_groups=NG, untie_embeddings_and_output_weights=True, add_bias_linear=False,
                      layernorm_epsilon=1e-6, num_attention_heads=NH, hidden_size=C), 1 + 6 * L + 2))
# Mistral-7B v0.2's shape: a Llama with no sliding window (trident imports it as one; its
# layouts are the Llama's, so one process is enough)
mistral = MistralForCausalLM(MistralConfig(hidden_size=C, intermediate_size=96, num_hidden_layers=L,
                                           num_attention_heads=NH, num_key_value_heads=NG, max_position_embeddings=T,
                                           vocab_size=V, rms_norm_eps=1e-5, rope_theta=1000000.0,
                                           sliding_window=None, tie_word_embeddings=False)).eval()
randomize(mistral)
families.append(("mistral-no-window", mistral, lambda G, n: hff.llama_grad(G, n, NH, NG, C // NH, C),
                 dict(families[0][3], layernorm_epsilon=1e-5, rotary_base=1000000.0), 1 + 6 * L + 2))
# Mistral-7B v0.1's shape: a window (T) shorter than the positions (2T); over sequences within it
# full causal attention is the windowed one (trident keeps seq_length and generation there)
mistral_w = MistralForCausalLM(MistralConfig(hidden_size=C, intermediate_size=96, num_hidden_layers=L,
                                             num_attention_heads=NH, num_key_value_heads=NG,
                                             max_position_embeddings=2 * T, vocab_size=V, rms_norm_eps=1e-5,
                                             rope_theta=10000.0, sliding_window=T,
                                             tie_word_embeddings=False)).eval()
randomize(mistral_w)
families.append(("mistral-window", mistral_w, lambda G, n: hff.llama_grad(G, n, NH, NG, C // NH, C),
                 dict(families[0][3], layernorm_epsilon=1e-5, max_position_embeddings=2 * T, sliding_window=T),
                 1 + 6 * L + 2))
# Qwen2.5-0.5B's shape: a Llama with q, k and v biases and a tied head; use_sliding_window false
# (its sliding_window, 4096 by default, then unused: trident imports it)
qwen2 = Qwen2ForCausalLM(Qwen2Config(hidden_size=C, intermediate_size=96, num_hidden_layers=L,
                                     num_attention_heads=NH, num_key_value_heads=NG, max_position_embeddings=T,
                                     vocab_size=V, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                     tie_word_embeddings=True, use_sliding_window=False)).eval()
randomize(qwen2)
families.append(("qwen2-bias-tied", qwen2, lambda G, n: hff.llama_grad(G, n, NH, NG, C // NH, C),
                 dict(families[0][3], rotary_base=1000000.0, untie_embeddings_and_output_weights=False,
                      add_qkv_bias=True), 1 + 7 * L + 1))
bloom = BloomForCausalLM(BloomConfig(hidden_size=48, n_layer=L, n_head=6, vocab_size=V,
                                     layer_norm_epsilon=1e-5)).eval()
randomize(bloom)
families.append(("bloom-6-heads", bloom, bloom_grad,
                 dict(position_embedding_type="alibi", embedding_layernorm=True, num_attention_heads=6,
                      hidden_size=48, max_position_embeddings=2048), 3 + 12 * L + 2))  # no table: 2048

# GPT-NeoX (Pythia's shape): parallel residual, exact GELU, rotary over a quarter of each head, an
# MLP of 160 (not 4h), untied; and the sequential residual with the tanh GELU (gelu_new), rotary
# over half the head, tied
for nname, parallel, act, pct, tied in (("neox-parallel-gelu", True, "gelu", 0.25, False),
                                        ("neox-sequential-gelu-new-tied", False, "gelu_new", 0.5, True)):
    neox = GPTNeoXForCausalLM(GPTNeoXConfig(hidden_size=C, intermediate_size=160, num_hidden_layers=L,
                                            num_attention_heads=NH, max_position_embeddings=T, vocab_size=V,
                                            rotary_pct=pct, rotary_emb_base=10000, layer_norm_eps=1e-5,
                                            hidden_act=act, use_parallel_residual=parallel,
                                            tie_word_embeddings=tied)).eval()
    randomize(neox)
    families.append((nname, neox, neox_grad,
                     dict(normalization="LayerNorm", position_embedding_type="rope", rotary_percent=pct,
                          ffn_hidden_size=160, untie_embeddings_and_output_weights=not tied, layernorm_epsilon=1e-5,
                          num_attention_heads=NH, hidden_size=C, parallel_residual=parallel,
                          gelu_approximate="none" if act == "gelu" else "tanh"), (3 if tied else 4) + 12 * L))

# Falcon (FalconForCausalLM): Falcon-40B's new decoder architecture (ln_attn and ln_mlp, the
# parallel residual, 8 heads in 2 key/value groups, no biases, tied); Falcon-7B's (one
# input_layernorm for both branches: parallel_shared_norm, multi_query: one key/value head, an odd
# head count: 5 of 8, no biases, tied); the sequential layer (parallel_attn false: input_layernorm
# and post_attention_layernorm, multi_query, biases, untied). TP must divide the key/value groups:
# the multi_query ones train in D4xP2
for fname, fkw, NHf, NGf, Cf, new_arch, shared, bias, tied in (
        ("falcon-40b-new-arch-gqa", dict(new_decoder_architecture=True, num_kv_heads=2), 8, 2, 64, True, False,
         False, True),
        ("falcon-7b-shared-norm-mq", dict(new_decoder_architecture=False, multi_query=True, parallel_attn=True), 5, 1,
         40, False, True, False, True),
        ("falcon-sequential-bias-untied", dict(new_decoder_architecture=False, multi_query=True,
                                               parallel_attn=False), 4, 1, C, False, False, True, False)):
    falcon = FalconForCausalLM(FalconConfig(hidden_size=Cf, num_hidden_layers=L, num_attention_heads=NHf,
                                            max_position_embeddings=T, vocab_size=V, layer_norm_epsilon=1e-5,
                                            rope_theta=10000.0, bias=bias, tie_word_embeddings=tied,
                                            **fkw)).eval()
    randomize(falcon)
    families.append((fname, falcon, lambda G, n, a=new_arch: falcon_grad(G, n, a),
                     dict(normalization="LayerNorm", position_embedding_type="rope", num_attention_heads=NHf,
                          num_query_groups=NGf, hidden_size=Cf, untie_embeddings_and_output_weights=not tied,
                          add_bias_linear=bias, layernorm_epsilon=1e-5, parallel_residual=new_arch or shared,
                          parallel_shared_norm=shared, gelu_approximate="none"),
                     (3 if tied else 4) + ((2 if shared else 4) + (8 if bias else 4)) * L))

if only:
    families = [f for f in families if only in f[0]]
for name, model, hf_grad, keys, n_tensors in families:
    src = os.path.join(work, name + "-hf")
    model.save_pretrained(src)
    ck = os.path.join(work, name + "-ck")
    out = convert(src, ck)
    if "bloom" in name:  # the released bigscience/bloom* files are BloomModel's (h.N.*, no lm_head)
        base = os.path.join(work, name + "-base-hf")
        model.transformer.save_pretrained(base)
        convert(base, ck + "-base")
        tt.check(f"{name}: BloomModel's save_pretrained folder (h.N.*) imports to the same checkpoint",
                 hff.same_checkpoint(ck, ck + "-base"))
    neox_ok = "neox" not in name or (("parallel_residual: true" in out) == keys["parallel_residual"] and
                                     ("gelu_approximate: none" in out) == (keys["gelu_approximate"] == "none") and
                                     f"rotary_percent: {keys['rotary_percent']}" in out)
    if "falcon" in name:  # the architecture's switches
        neox_ok = (("parallel_residual: true" in out) == keys["parallel_residual"] and
                   ("parallel_shared_norm: true" in out) == keys["parallel_shared_norm"] and
                   "gelu_approximate: none" in out and "rotary_percent" not in out and
                   f"num_query_groups: {keys['num_query_groups']}" in out and
                   f"add_bias_linear: {str(keys['add_bias_linear']).lower()}" in out and
                   f"untie_embeddings_and_output_weights: {str(keys['untie_embeddings_and_output_weights']).lower()}"
                   in out and f"ffn_hidden_size: {4 * keys['hidden_size']}" in out)
    tt.check(f"{name}: trident convert prints the family's model section",
             ("rope" in out and ("add_qkv_bias: true" in out) == name.startswith("qwen2")
              and (f"sliding_window: {T}" in out) == (name == "mistral-window") and neox_ok)
             if "bloom" not in name else ("alibi" in out and "embedding_layernorm: true" in out), out)
    cfg = hff.oracle_config(work, name, L, T, V, keys, prefix, ck)
    hff.logits_check(probe, cfg, work, name, model, T, V)
    prompt = [5, 17, 200, 3, 42]
    with torch.no_grad():
        theirs = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                                pad_token_id=0)[0, len(prompt):].tolist()
    for what, where, extra in (("the HF folder", src, []), ("the import with --config", ck, ["--config", cfg])):
        rc, so, se = tt.outputs([trident, "generate", where, *extra, "--prompt-ids", ",".join(map(str, prompt)),
                                 "--max-new-tokens", "12", "--temperature", "0", "--json"], timeout=120)
        ours = json.loads(so)["generated_ids"] if rc == 0 else None
        tt.check(f"{name}: greedy trident generate of {what} = transformers' generate (12 tokens)",
                 ours == theirs, f"exit {rc} {se[-300:]}\ntrident      {ours}\ntransformers {theirs}")
    if "neox" in name or "falcon" in name:  # trident eval of the folder: perplexity windows, byte tokens
        hff.eval_check(trident, src, work, name, model, "the rotary query heads of a parallel residual group; " * 3,
                       T)
    back = os.path.join(work, name + "-back")
    rc, _, err = tt.outputs([trident, "convert", "--to", "hf", "--input", ck, "--output", back, "--config", cfg],
                            timeout=300)
    if tt.check(f"{name}: trident convert --to hf --config", rc == 0, err):
        a, b = load_file(os.path.join(src, "model.safetensors")), load_file(os.path.join(back, "model.safetensors"))
        tt.check(f"{name}: HF -> trident -> HF is bit-exact (fp32)",
                 set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a),
                 f"keys only on one side: {sorted(set(a) ^ set(b))}; differing: "
                 f"{[k for k in a if k in b and not torch.equal(a[k], b[k])]}")
        loaded, info = AutoModelForCausalLM.from_pretrained(back, output_loading_info=True)
        probe_tokens = torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            ref = model(probe_tokens).logits
            rel = ((loaded.eval()(probe_tokens).logits - ref).abs().max()).item()
        # a tanh GELU is exported as gelu_pytorch_tanh (PyTorch's fused one): from gelu_new (the
        # same formula in Python) the logits differ by rounding alone
        act = getattr(model.config, "hidden_act", None)
        renamed = act == "gelu_new" and loaded.config.hidden_act == "gelu_pytorch_tanh"
        tt.check(f"{name}: the export loads ({type(loaded).__name__}) with no missing or unexpected keys, "
                 + ("logits within 1e-6 of the largest (gelu_new exported as gelu_pytorch_tanh)" if renamed
                    else "same logits"), not info["missing_keys"] and not info["unexpected_keys"]
                 and (rel <= 1e-6 * ref.abs().max().item() if renamed else rel == 0),
                 f"{info}; max |logit diff| {rel:.2e}", show=renamed)
    hf_loss, G = hff.batch_grads(probe, cfg, work, name, model, T, V)
    layouts = [("1", 1, 1, 1, ())] + ([] if quick or name.startswith("mistral") else
                                      [("D4xP2", 8, 1, 2, ())] if keys.get("num_query_groups") == 1 else
                                      [("D2xT2xP2-sp", 8, 2, 2, ("parallel.sequence_parallel=true",))])
    hff.grads_check(trident, cfg, work, name, layouts, hf_loss, lambda t: hf_grad(G, t), n_tensors)

# A folder in Pythia's shape with its tokenizer.json in GPT-NeoX-20B's (byte-level BPE, NFC
# normalizer, ByteLevel pre-tokenizer without use_regex as tokenizers 0.12 wrote it, runs of
# spaces as added tokens): `trident generate --prompt` and `trident eval --input` encode the
# text as tokenizers does, and continue it / score it as transformers does
# A folder in Falcon-7B's shape (one input_layernorm, multi_query; 5 heads) with a tokenizer.json in
# tiiuae/falcon-7b's shape (tests/tokenizer/oracle_env.py's: Punctuation, ByteLevel, Digits and a
# Split of 3 digits; >>TITLE<< ... <|endoftext|>), trained here by tokenizers: `trident generate
# --prompt` and `trident eval --input` encode the text as tokenizers does, and continue it / score
# it as transformers does
if not only or only in "falcon-shaped":
    from tokenizers import Tokenizer  # noqa: E402
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tokenizer"))
    import oracle_env  # noqa: E402
    ftexts = ["Falcon-7B: 1,500B tokens (RefinedWeb), 32 layers; 71 heads! Is it 2023-05-25?",
              "x=12345678; y = (x * 3.25) / 7 -- 'quoted' \"double\" [brackets] {braces} ... done.",
              "the parallel attention and MLP share one layer norm; multi-query keys, values " * 3]
    fdir = tt.fresh_dir(os.path.join(work, "falcon-shaped-hf"))
    tt.write(os.path.join(fdir, "tokenizer.json"), json.dumps(oracle_env.falcon_style(ftexts * 20, 600)))
    ftok = Tokenizer.from_file(os.path.join(fdir, "tokenizer.json"))
    torch.manual_seed(45)
    ftm = FalconForCausalLM(FalconConfig(hidden_size=40, num_hidden_layers=L, num_attention_heads=5,
                                         new_decoder_architecture=False, multi_query=True, parallel_attn=True,
                                         bias=False, max_position_embeddings=128,
                                         vocab_size=ftok.get_vocab_size())).eval()
    randomize(ftm)
    ftm.save_pretrained(fdir)
    for text in ftexts + ["  two spaces and 1234567 digits", ">>TITLE<<Falcon<|endoftext|>"]:
        want = ftok.encode(text).ids
        with torch.no_grad():
            theirs = ftm.generate(torch.tensor([want]), max_new_tokens=6, do_sample=False,
                                  pad_token_id=11)[0, len(want):].tolist()
        rc, so, se = tt.outputs([trident, "generate", fdir, "--prompt", text, "--max-new-tokens", "6",
                                 "--temperature", "0", "--json"], timeout=120)
        got = json.loads(so) if rc == 0 else {}
        tt.check(f"Falcon-7B-shaped folder with its tokenizer.json: generate --prompt {text[:24]!r}...: tokenizers' "
                 f"ids, transformers' 6 greedy tokens",
                 got.get("prompt_ids") == want and got.get("generated_ids") == theirs,
                 f"exit {rc} {se[-300:]}\ntrident {got.get('prompt_ids')} -> {got.get('generated_ids')}\n"
                 f"hf      {want} -> {theirs}")
    feval = os.path.join(work, "falcon-eval.txt")
    tt.write(feval, ftexts[0] + ftexts[1])
    ids = ftok.encode(ftexts[0] + ftexts[1]).ids
    with torch.no_grad():
        lp = F.log_softmax(ftm(torch.tensor([ids])).logits[0].double(), -1)
    nll = -sum(lp[j - 1, ids[j]].item() for j in range(1, len(ids)))
    rc, so, se = tt.outputs([trident, "eval", fdir, "--input", feval, "--context", "128", "--json"], timeout=120)
    got = (json.loads(so[so.index("{"):]).get("perplexity") or {}) if rc == 0 and "{" in so else {}
    rel = abs(got.get("nll_sum", float("inf")) - nll) / nll
    tt.check(f"Falcon-7B-shaped folder: trident eval --input with its tokenizer ({len(ids) - 1} tokens scored) = "
             f"transformers' nll", got.get("tokens") == len(ids) - 1 and rel <= 1e-5,
             f"exit {rc} {se[-300:]}\ntrident {got}\ntransformers {len(ids) - 1} tokens, nll_sum {nll:.6f}; "
             f"relative {rel:.1e}", show=True)

if only and only not in "pythia-shaped":
    tt.finish("PASSED")
from tokenizers import (AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers,  # noqa: E402
                        processors, trainers)

texts = ["The quick brown fox jumps over the lazy dog.  Indented   code\n    def f(x):\n        return x\n",
         "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u2014 \u201cquotes\u201d 1234567 tabs\tand\ttabs",
         "Pythia rotary parallel residual GELU " * 5]
bpe = Tokenizer(models.BPE())
bpe.normalizer = normalizers.NFC()
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True)
bpe.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=True)
bpe.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=True)
bpe.train_from_iterator(texts * 20, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|padding|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
bpe.add_tokens([AddedToken(" " * n, normalized=True) for n in (24, 16, 8, 4, 2)])
pythia_dir = os.path.join(work, "pythia-shaped-hf")
os.makedirs(pythia_dir, exist_ok=True)
tok_path = os.path.join(pythia_dir, "tokenizer.json")
bpe.save(tok_path)
tj = json.load(open(tok_path))
tj["pre_tokenizer"].pop("use_regex", None)
tt.write(tok_path, json.dumps(tj))
torch.manual_seed(44)
pythia = GPTNeoXForCausalLM(GPTNeoXConfig(hidden_size=C, intermediate_size=4 * C, num_hidden_layers=L,
                                          num_attention_heads=NH, max_position_embeddings=128,
                                          vocab_size=bpe.get_vocab_size(), rotary_pct=0.25)).eval()
randomize(pythia)
pythia.save_pretrained(pythia_dir)
hf_tok = Tokenizer.from_file(tok_path)
for text in texts + ["  two spaces", "x" + " " * 30 + "y"]:
    want = hf_tok.encode(text).ids
    with torch.no_grad():
        theirs = pythia.generate(torch.tensor([want]), max_new_tokens=6, do_sample=False,
                                 pad_token_id=1)[0, len(want):].tolist()
    rc, so, se = tt.outputs([trident, "generate", pythia_dir, "--prompt", text, "--max-new-tokens", "6",
                             "--temperature", "0", "--json"], timeout=120)
    got = json.loads(so) if rc == 0 else {}
    tt.check(f"Pythia-shaped folder with its tokenizer.json: generate --prompt {text[:24]!r}...: tokenizers' ids, "
             f"transformers' 6 greedy tokens", got.get("prompt_ids") == want and got.get("generated_ids") == theirs,
             f"exit {rc} {se[-300:]}\ntrident {got.get('prompt_ids')} -> {got.get('generated_ids')}\n"
             f"hf      {want} -> {theirs}")
eval_text = os.path.join(work, "pythia-eval.txt")
tt.write(eval_text, texts[0] + texts[1])
ids = hf_tok.encode(texts[0] + texts[1]).ids
with torch.no_grad():
    lp = F.log_softmax(pythia(torch.tensor([ids])).logits[0].double(), -1)
nll = -sum(lp[j - 1, ids[j]].item() for j in range(1, len(ids)))
rc, so, se = tt.outputs([trident, "eval", pythia_dir, "--input", eval_text, "--context", "128", "--json"],
                        timeout=120)
got = (json.loads(so[so.index("{"):]).get("perplexity") or {}) if rc == 0 and "{" in so else {}
rel = abs(got.get("nll_sum", float("inf")) - nll) / nll
tt.check(f"Pythia-shaped folder: trident eval --input with its tokenizer ({len(ids) - 1} tokens scored) = "
         f"transformers' nll", got.get("tokens") == len(ids) - 1 and rel <= 1e-5,
         f"exit {rc} {se[-300:]}\ntrident {got}\ntransformers {len(ids) - 1} tokens, nll_sum {nll:.6f}; "
         f"relative {rel:.1e}", show=True)
tt.finish("PASSED")
