/* Fuzz targets of trident's readers of untrusted files (tests/fuzz/).
 *
 * Contract. Each target is one C file that defines
 *
 *     int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
 *
 * and turns the bytes into the file(s) one library reader takes (safetensors, config.json,
 * tokenizer files, datasets, JSONL for preprocessing, YAML, grid specs, checkpoint manifests
 * and whole checkpoints). The reader must either succeed or return an error code: a bad input
 * never crashes, aborts, leaks or reaches undefined behaviour (the replay tests run under
 * address + undefined sanitizers, libFuzzer campaigns under the same). After a successful load
 * the target checks what the reader promises and abort()s when it does not hold:
 *
 *   st        every tensor of a safetensors file reads as f32 (small ones) and is found by name
 *   pt        a pytorch_model.bin (torch.save ZIP or legacy file, hf/torch_bin.c): every tensor
 *             (small ones) reads, as f32 where a float, inside the file, found by name
 *   megatron  a Megatron-LM rank file (model_optim_rng.pt, PT_OBJECTS' allowlist) as the one
 *             rank of a --save folder, or (parts cut at "\n@@@\n") a --ckpt-format torch_dist
 *             folder's common.pt, .metadata (PT_DCP's allowlist) and .distcp files ->
 *             tr_megatron_import: a passing import's checkpoint reads back with the model
 *             section it reported
 *   meta      params.json of a Meta Llama folder (its consolidated.00.pth a fixture) ->
 *             tr_meta_import: a passing import's checkpoint reads back with the model section it
 *             reported, of the fixture's sizes
 *   hfcfg     config.json -> family -> model config (no check beyond "no crash")
 *   tokhf     tokenizer.json: encoding a fixed text and the input gives ids in [0, vocab)
 *   tokgpt2   vocab.json + merges.txt: same
 *   tokspm    sentencepiece's tokenizer.model (Llama2Tokenizer / GPTSentencePieceTokenizer): same
 *   tiktoken  a tiktoken rank file (Llama3Tokenizer / TikTokenizer, text or Megatron's JSON): same
 *   idx       Megatron .idx/.bin: every sample reads, tokens in [0, vocab), samples locate
 *   llmc      llm.c shard: same
 *   llmcmodel llm.c's GPT-2 model file -> tr_llmc_import: the checkpoint reads back with the
 *             model section reported, and exports to the input's bytes where its unread parts
 *             are zero
 *   prep      JSONL -> tr_preprocess -> the output reopens (gpt or sft) and every sample reads,
 *             loss-mask weights are 0 or 1
 *   parquet   a Parquet file (or gzip / zstd JSON Lines: any input preprocess tells by its
 *             first bytes) -> tr_preprocess of one or two columns -> the outputs reopen
 *   import    HF config.json + model.safetensors -> tr_hf_import (no crash)
 *   roundtrip the same -> tr_hf_import -> tr_hf_export: what imports exports, every tensor
 *             back with the same float32 values
 *   blend     weighted data_path lists -> blended dataset: samples read, sources in range
 *   yaml      config text -> tr_config_load_string; a loaded config writes, reloads and
 *             compares equal (round trip)
 *   grid      grid spec -> points -> configs
 *   manifest  a checkpoint's manifest.txt -> tr_checkpoint_read_model
 *   ckpt      a checkpoint with one or two files replaced or patched -> tr_checkpoint_load:
 *             parameters and Adam's moments finite, exp_avg_sq >= 0
 *   lora      a LoRA checkpoint (or its base) patched -> tr_hf_export_lora: the written
 *             safetensors file opens, its values are finite, the adapters of the run's rank
 *   evaltasks JSON Lines loglikelihood requests -> tr_eval_tasks_load (bytes) -> every
 *             request scored by a tiny model: ids and lengths in range, log-likelihoods
 *             finite and <= 0
 *   lora-llama, lora-bloom  the same for a Llama and a Bloom (PEFT's split q/k/v and gate/up
 *             adapters, Bloom's names), and a Hugging Face folder as the base (patched too)
 *
 * Several inputs in one: fz_split() cuts the bytes at "\n@@@\n" (tokenizer files, idx/bin,
 * config/safetensors). Fixtures (checkpoints) are made at run time from the small YAML files in
 * tests/fuzz/fixtures/ by library calls (fixture.c), in the target's temporary folder.
 *
 * Each target's files live in one mkdtemp folder under $TMPDIR (default /dev/shm where it is a
 * writable folder, else /tmp: checkpoints are saved with fsync, which on a disk made the
 * checkpoint targets' replays 30 times slower), removed at exit.
 * Two builds: with replay_main.c (any compiler; `meson test fuzz-replay-TARGET` runs the
 * committed corpus tests/fuzz/corpus/TARGET), and with clang -fsanitize=fuzzer (meson option
 * fuzz; scripts/fuzz.sh TARGET SECONDS runs a campaign). */
#ifndef TRIDENT_TESTS_FUZZ_H
#define TRIDENT_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A call whose error is expected and dropped (TR_MUST_CHECK functions). */
#define FZ_IGNORE(call) do { if (call) {} } while (0)

/* The target's temporary folder (made on first call, removed with its contents at exit);
 * also sets the log level to errors only. */
const char *fz_dir(void);
/* fz_dir()/name into out (1024 bytes hold any name under 480 characters). */
void fz_path(char *out, size_t cap, const char *name);
/* Writes n bytes to fz_dir()/name (or to path). */
void fz_write(const char *name, const uint8_t *d, size_t n);
void fz_write_path(const char *path, const uint8_t *d, size_t n);
/* The whole file into a malloc'ed buffer (aborts when it cannot be read). */
uint8_t *fz_slurp(const char *path, size_t *n);
/* Cuts data at "\n@@@\n" into k parts (the last takes the rest; missing parts are empty).
 * Returns the number of parts found. */
int fz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len, int k);
/* A Hugging Face model folder in fz_dir(): the input's config.json "\n@@@\n" model.safetensors
 * (the import and roundtrip targets' input). */
void fz_write_hf_folder(const uint8_t *data, size_t size);
/* Aborts with a message when v[i] is not finite (or negative, with nonneg). */
void fz_check_finite(const char *what, const float *v, size_t n, int nonneg);
/* Removes a folder and everything below it (no error when it does not exist). */
void fz_rmtree(const char *path);
/* The folder of the fixture configs: $FUZZ_FIXTURE_DIR, else the build's FUZZ_FIXTURE_DIR. */
const char *fz_fixture_dir(void);
/* Aborts with "what: tr_errmsg()" when rc != 0 (setup steps that must not fail). */
void fz_must(int rc, const char *what);

#endif
