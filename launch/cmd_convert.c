/* `trident convert --from hf|megatron | --to hf|megatron --input DIR --output DIR`: checkpoints
 * between trident and Hugging Face transformers (safetensors, pytorch_model.bin, PEFT adapters)
 * or Megatron-LM (--ckpt-format torch), both ways. */
#include "launch/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/core.h"
#include "hf/hf.h"
#include "hf/llmc.h"
#include "hf/megatron.h"
#include "hf/meta.h"
#include "launch/args.h"
#include "tokenizer/tokenizer.h"
#include "train/train.h"

static void convert_usage(FILE *f)
{
    fprintf(f,
            "usage: trident convert --from hf --input HF_DIR --output CKPT_DIR\n"
            "       trident convert --from hf --input HF_DIR --adapters PEFT_DIR --output CKPT_DIR\n"
            "       trident convert --to hf --input CKPT_DIR --output HF_DIR [options]\n"
            "       trident convert --from megatron --input SAVE_DIR --output CKPT_DIR\n"
            "                       [--iteration N]\n"
            "       trident convert --to megatron --input CKPT_DIR --output SAVE_DIR\n"
            "                       [--tp T] [--pp P] [--config FILE]\n"
            "       trident convert --from meta --input META_DIR --output CKPT_DIR\n"
            "       trident convert --to meta --input CKPT_DIR --output META_DIR [--mp N]\n"
            "                       [--dtype fp32|bf16]\n"
            "       trident convert --from llmc --input FILE.bin --output CKPT_DIR\n"
            "       trident convert --to llmc --input CKPT_DIR --output FILE.bin\n"
            "                       [--dtype fp32|bf16]\n"
            "\n"
            "Converts GPT-2, Llama, Qwen2, Bloom, GPT-NeoX, Falcon, Phi, StableLM, Gemma,\n"
            "GPTBigCode, GPT-J, MPT and OPT checkpoints between Hugging Face transformers\n"
            "(GPT2LMHeadModel, LlamaForCausalLM (and Mistral), Qwen2ForCausalLM,\n"
            "BloomForCausalLM, GPTNeoXForCausalLM (Pythia), FalconForCausalLM (Falcon-7B,\n"
            "-40B, -180B), PhiForCausalLM (Phi-1, -1.5, -2), StableLmForCausalLM,\n"
            "GemmaForCausalLM, GPTBigCodeForCausalLM (StarCoder), GPTJForCausalLM (GPT-J-6B),\n"
            "MptForCausalLM (MPT-7B, -30B), OPTForCausalLM (OPT-125m .. -66b but -350m):\n"
            "config.json and model.safetensors, or model.safetensors.index.json and its shards)\n"
            "and trident.\n"
            "\n"
            "  --from hf   HF_DIR -> a trident checkpoint of the weights alone (CKPT_DIR/release,\n"
            "              the tracker saying 'release'): set checkpoint.load to CKPT_DIR and the\n"
            "              printed model section in the config, and training starts at iteration\n"
            "              1 from these weights, in any layout. F32, F16, BF16 weights are read.\n"
            "  --from megatron  SAVE_DIR, a Megatron-LM --save folder (--ckpt-format torch:\n"
            "              latest_checkpointed_iteration.txt, iter_NNNNNNN/mp_rank_TT[_PPP]/\n"
            "              model_optim_rng.pt; megatron-core's or the legacy GPT model's names,\n"
            "              any tensor / pipeline / virtual-pipeline layout) -> the same release\n"
            "              checkpoint; its args give the printed model section\n"
            "  --iteration N  --from megatron: iter_000000N instead of the tracker's\n"
            "  --to megatron  the latest checkpoint of CKPT_DIR -> SAVE_DIR, Megatron-LM's\n"
            "              --ckpt-format torch folder (the tracker 'release',\n"
            "              release/mp_rank_TT[_PPP]/model_optim_rng.pt: args, megatron-core's\n"
            "              names, F32 (or BF16 by --dtype), no optimizer: Megatron-LM loads\n"
            "              it with --finetune or --no-load-optim --no-load-rng); --config FILE\n"
            "              gives the model's switches (as for --to hf)\n"
            "  --tp T, --pp P  --to megatron: tensor / pipeline-parallel sizes (default 1)\n"
            "  --from meta  META_DIR, Meta's own Llama download (Llama 1, 2, 3, 3.1, 3.2, Code\n"
            "              Llama: params.json, consolidated.NN.pth per model-parallel rank,\n"
            "              tokenizer.model) -> the same release checkpoint (tokenizer.model\n"
            "              copied beside it); the printed model section is its params.json\n"
            "  --to meta   a Llama checkpoint -> META_DIR in Meta's format (params.json,\n"
            "              consolidated.NN.pth, its tokenizer.model when it has one), which\n"
            "              Meta's reference code and llama-stack load\n"
            "  --mp N      --to meta: model-parallel files (default 1)\n"
            "  --from llmc  FILE.bin, llm.c's GPT-2 model checkpoint (gpt2_124M.bin,\n"
            "              gpt2_124M_bf16.bin, train_gpt2.cu's model_NNNNNNNN.bin) -> the same\n"
            "              release checkpoint (the padded vocabulary's rows dropped)\n"
            "  --to llmc   a GPT-2 checkpoint -> FILE.bin in llm.c's format (the vocabulary\n"
            "              padded to a multiple of 128): fp32 (version 3) for train_gpt2.c and\n"
            "              train_gpt2.cu built with PRECISION=FP32, --dtype bf16 (version 5) for\n"
            "              train_gpt2.cu's default bf16 build\n"
            "  --adapters PEFT_DIR  --from hf: PEFT's LoRA adapters of HF_DIR (adapter_config.json,\n"
            "              adapter_model.safetensors or .bin) -> CKPT_DIR holds them as a LoRA\n"
            "              run's checkpoint, CKPT_DIR/base the base; the printed finetune and\n"
            "              checkpoint sections continue them (train), and generate, eval and\n"
            "              --to hf --merge-lora / --adapters-only read CKPT_DIR\n"
            "  --to hf     the latest checkpoint of CKPT_DIR -> HF_DIR: config.json,\n"
            "              generation_config.json, model.safetensors (the vocabulary's padding\n"
            "              removed), which AutoModelForCausalLM.from_pretrained(HF_DIR) loads.\n"
            "\n"
            "options:\n"
            "  --input DIR            the folder to read (--from llmc: the file)\n"
            "  --output DIR           the folder to write: it must not exist (or be empty); it\n"
            "                         is written as DIR.tmp-PID and renamed at the end, so it\n"
            "                         appears complete or not at all (--to llmc: the file,\n"
            "                         written so too)\n"
            "  --dtype fp32|bf16      --to hf, megatron, meta, llmc: the weights' type (default\n"
            "                         fp32; llmc's bf16: version 5; megatron's: args.bf16,\n"
            "                         params_dtype bfloat16)\n"
            "  --max-shard-size SIZE  --to hf: shards of at most SIZE (bytes, or with KB, MB,\n"
            "                         GB, KiB, MiB, GiB; default 5GB, transformers' default)\n"
            "                         with model.safetensors.index.json; one file when it fits\n"
            "  --eos-id ID            --to hf: bos_token_id and eos_token_id (default null)\n"
            "  --config FILE          --to hf: the run's config; its model section's switches\n"
            "                         (Llama: RMSNorm, rope, swiglu, ...; Qwen2: a Llama with\n"
            "                         add_qkv_bias; Bloom: alibi, embedding_layernorm;\n"
            "                         GPT-NeoX: LayerNorm, rope, parallel_residual, ...;\n"
            "                         Falcon: the exact GELU with no linear biases, GQA or\n"
            "                         parallel_shared_norm; Phi: output_layer_bias with\n"
            "                         parallel_shared_norm; GPT-J: that without linear\n"
            "                         biases but add_mlp_bias; MPT: alibi with the exact\n"
            "                         GELU, no linear biases, layernorm_bias false; OPT:\n"
            "                         learned positions with relu, or without linear\n"
            "                         biases; Phi-3: a Llama's with hf_family phi3;\n"
            "                         Mixtral: a Llama's or Mistral's with num_experts) say\n"
            "                         which model to write\n"
            "                         (default: the checkpoint manifest's family line; GPT-2\n"
            "                         for one written before it). --from hf reads the\n"
            "                         folders of each family above. Its\n"
            "                         data.tokenizer's files go into the folder too\n"
            "                         (tokenizer.json and a tokenizer_config.json beside it,\n"
            "                         or vocab.json + merges.txt).\n"
            "  --merge-lora           --to hf with --config of a LoRA run (finetune.lora,\n"
            "                         finetune.load): the base with the adapters merged in\n"
            "  --adapters-only        --to hf of a LoRA run's checkpoint: PEFT's\n"
            "                         adapter_config.json + adapter_model.safetensors (the\n"
            "                         model and the adapters' rank, alpha and targets from\n"
            "                         its manifest; --config for one saved before 2026-11-28)\n"
            "  -h, --help             this text\n"
            "\n"
            "Exit status: 0 success, 1 runtime failure (disk, memory), 2 bad usage or input (a\n"
            "malformed or unsupported file: the message names it and the cause).\n");
}

/* "5GB", "100MB", "64KiB", "123": bytes (decimal units as transformers reads them). */
static int parse_size(const char *text, uint64_t *out)
{
    char *end;
    double v = strtod(text, &end);
    static const struct {
        const char *unit;
        double scale;
    } units[] = {{"", 1},           {"B", 1},      {"KB", 1e3},           {"MB", 1e6},
                 {"GB", 1e9},       {"TB", 1e12},  {"KIB", 1024.0},       {"MIB", 1048576.0},
                 {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
    if (end == text || !(v > 0))
        return 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(end, units[i].unit)) {
            double bytes = v * units[i].scale;
            if (bytes < 1 || bytes > 1e18)
                return 0;
            *out = (uint64_t)bytes;
            return 1;
        }
    return 0;
}

static void print_model_section(const tr_model_config *m)
{
    printf("model section for the training config:\n"
           "model:\n"
           "  num_layers: %d\n"
           "  hidden_size: %d\n"
           "  num_attention_heads: %d\n"
           "  vocab_size: %d\n"
           "  max_position_embeddings: %d\n",
           m->num_layers, m->hidden_size, m->num_attention_heads, m->vocab_size,
           m->max_position_embeddings);
    if (m->normalization) /* Llama, Qwen2, Bloom */
        printf("  seq_length: %d\n"
               "  layernorm_epsilon: %.9g\n"
               "  normalization: %s\n"
               "  position_embedding_type: %s\n"
               "  swiglu: %s\n"
               "  ffn_hidden_size: %d\n"
               "  num_query_groups: %d\n"
               "  untie_embeddings_and_output_weights: %s\n"
               "  add_bias_linear: %s\n"
               "  embedding_layernorm: %s\n",
               m->seq_length, m->layernorm_epsilon, m->normalization, m->position_embedding_type,
               m->swiglu ? "true" : "false", tr_model_ffn_hidden(m), m->num_query_groups,
               m->untie_embeddings_and_output_weights ? "true" : "false",
               m->add_bias_linear ? "true" : "false", m->embedding_layernorm ? "true" : "false");
    if (m->normalization && m->add_qkv_bias && !m->add_bias_linear)
        printf("  add_qkv_bias: true\n");
    if (m->normalization && m->add_mlp_bias && !m->add_bias_linear)
        printf("  add_mlp_bias: true\n"); /* GPT-J's fc_in / fc_out biases */
    if (m->normalization && m->sliding_window)
        printf("  sliding_window: %d\n", m->sliding_window);
    if (m->normalization && !strcmp(m->position_embedding_type, "rope"))
        printf("  rotary_base: %.9g\n", m->rotary_base);
    if (m->normalization && !strcmp(m->position_embedding_type, "rope") &&
        m->rotary_percent != 1.0) /* GPT-NeoX's rotary_pct */
        printf("  rotary_percent: %.9g\n", m->rotary_percent);
    if (m->normalization && m->parallel_residual)
        printf("  parallel_residual: true\n");
    if (m->normalization && m->parallel_residual && m->parallel_shared_norm) /* Falcon-7B's */
        printf("  parallel_shared_norm: true\n");
    if (m->normalization && !m->relu && m->gelu_approximate &&
        !strcmp(m->gelu_approximate, "none"))
        printf("  gelu_approximate: none\n");
    if (m->normalization && m->untie_embeddings_and_output_weights && m->output_layer_bias)
        printf("  output_layer_bias: true\n"); /* Phi's lm_head.bias */
    if (m->normalization && m->kv_channels) /* Gemma's switches */
        printf("  kv_channels: %d\n", m->kv_channels);
    if (m->normalization && m->apply_layernorm_1p)
        printf("  apply_layernorm_1p: true\n");
    if (m->normalization && m->no_layernorm_bias && strcmp(m->normalization, "RMSNorm"))
        printf("  layernorm_bias: false\n"); /* MPT's norms */
    if (m->normalization && m->embedding_multiplier && m->embedding_multiplier != 1.0)
        printf("  embedding_multiplier: %.9g\n", m->embedding_multiplier);
    if (m->normalization && m->geglu)
        printf("  geglu: true\n");
    if (m->normalization && m->relu)
        printf("  relu: true\n"); /* OPT's MLP */
    if (m->normalization && m->hf_family && strcmp(m->hf_family, "auto"))
        printf("  hf_family: %s\n", m->hf_family); /* Phi-3's fused tensors on export */
    if (m->normalization && m->rotary_seq_len_interpolation_factor &&
        m->rotary_seq_len_interpolation_factor != 1.0) /* rope_scaling "linear" */
        printf("  rotary_seq_len_interpolation_factor: %.9g\n",
               m->rotary_seq_len_interpolation_factor);
    if (m->normalization && m->num_experts) /* Mixtral's experts */
        printf("  num_experts: %d\n  moe_router_topk: %d\n  moe_router_pre_softmax: %s\n"
               "  moe_aux_loss_coeff: %.9g\n", m->num_experts, m->moe_router_topk,
               m->moe_router_pre_softmax ? "true" : "false", m->moe_aux_loss_coeff);
    if (m->normalization && m->num_experts && m->moe_z_loss_coeff != 0.0)
        printf("  moe_z_loss_coeff: %.9g\n", m->moe_z_loss_coeff);
    if (m->normalization && m->use_rope_scaling) /* Llama 3.1's rope_scaling "llama3" */
        printf("  use_rope_scaling: true\n  rope_scaling_factor: %.9g\n"
               "  rope_scaling_low_freq_factor: %.9g\n  rope_scaling_high_freq_factor: %.9g\n"
               "  rope_scaling_original_max_position_embeddings: %d\n",
               m->rope_scaling_factor, m->rope_scaling_low_freq_factor,
               m->rope_scaling_high_freq_factor,
               m->rope_scaling_original_max_position_embeddings);
    if (m->hidden_dropout > 0 || m->attention_dropout > 0) /* config.json's or Megatron's rates */
        printf("  hidden_dropout: %.9g\n  attention_dropout: %.9g\n", m->hidden_dropout,
               m->attention_dropout);
}

/* finetune and checkpoint sections of a run that continues PEFT adapters imported into dir */
static void print_lora_sections(const char *dir, const tr_hf_lora_import *li)
{
    static const char *const names[4] = {"qkv", "proj", "fc1", "fc2"};
    printf("finetune:\n  load: %s/base\n  lora:\n    rank: %d\n    alpha: %.9g\n"
           "    dropout: %.9g\n    target_modules: [", dir, li->rank, li->alpha, li->dropout);
    for (int t = 0, n = 0; t < 4; t++)
        if (li->targets & (1 << t))
            printf("%s%s", n++ ? ", " : "", names[t]);
    printf("]\ncheckpoint:\n  load: %s\n", dir);
    if (li->blocks > 1)
        printf("# PEFT's rank-%d adapters of a fused layer's projections have %d different A\n"
               "# matrices: trident holds them exactly as one adapter of rank %d, alpha %.9g\n",
               li->peft_rank, li->blocks, li->rank, li->alpha);
}

int tr_cmd_convert(int argc, char **argv)
{
    enum { FROM, TO, INPUT, OUTPUT, DTYPE, SHARD, EOS, CONFIG, MERGE, ADAPTERS, PEFT, ITER, TP,
           PP, MP };
    static const arg_opt options[] = {
        [FROM] = {.name = "--from", .kind = ARG_VALUE},
        [TO] = {.name = "--to", .kind = ARG_VALUE},
        [INPUT] = {.name = "--input", .kind = ARG_VALUE},
        [OUTPUT] = {.name = "--output", .kind = ARG_VALUE},
        [DTYPE] = {.name = "--dtype", .kind = ARG_VALUE},
        [SHARD] = {.name = "--max-shard-size", .kind = ARG_VALUE},
        [EOS] = {.name = "--eos-id", .kind = ARG_VALUE},
        [CONFIG] = {.name = "--config", .kind = ARG_VALUE},
        [MERGE] = {.name = "--merge-lora", .kind = ARG_FLAG},
        [ADAPTERS] = {.name = "--adapters-only", .kind = ARG_FLAG},
        [PEFT] = {.name = "--adapters", .kind = ARG_VALUE},
        [ITER] = {.name = "--iteration", .kind = ARG_VALUE},
        [TP] = {.name = "--tp", .kind = ARG_VALUE},
        [PP] = {.name = "--pp", .kind = ARG_VALUE},
        [MP] = {.name = "--mp", .kind = ARG_VALUE},
        {.name = NULL},
    };
    arg_parser a = {.cmd = "trident convert", .opts = options, .usage = convert_usage,
                    .argc = argc, .argv = argv};
    const char *from = NULL, *to = NULL, *input = NULL, *output = NULL, *config = NULL, *v;
    const char *peft = NULL;
    tr_hf_export_options o = {.max_shard_bytes = 5000000000ULL, .eos_token_id = -1};
    int rc = 0, opt, export_opts = 0, merge = 0, adapters = 0, megatron = 0, mlm_iter = -1;
    int to_mlm = 0, tp = 0, pp = 0, hf_only = 0, meta = 0, to_meta = 0, mp = 0;
    int llmc = 0, to_llmc = 0;
    while (!rc && (opt = args_next(&a, &v)) != ARGS_END) {
        if (opt == ARGS_HELP || opt == ARGS_ERROR)
            return opt == ARGS_HELP ? 0 : 2;
        if (opt == ARGS_POSITIONAL)
            rc = args_error(&a, "unexpected argument '%s' (folders go after --input and "
                                "--output)", v);
        else if (opt == FROM && !strcmp(v, "megatron"))
            from = v, megatron = 1;
        else if (opt == TO && !strcmp(v, "megatron"))
            to = v, to_mlm = 1;
        else if ((opt == FROM || opt == TO) && !strcmp(v, "meta"))
            *(opt == FROM ? &from : &to) = v, *(opt == FROM ? &meta : &to_meta) = 1;
        else if ((opt == FROM || opt == TO) && !strcmp(v, "llmc"))
            *(opt == FROM ? &from : &to) = v, *(opt == FROM ? &llmc : &to_llmc) = 1;
        else if (opt == MP)
            rc = args_int(&a, "--mp", v, 1, 1024, &mp);
        else if (opt == TP || opt == PP)
            rc = args_int(&a, opt == TP ? "--tp" : "--pp", v, 1, 4096, opt == TP ? &tp : &pp);
        else if (opt == ITER)
            rc = args_int(&a, "--iteration", v, 0, 9999999, &mlm_iter);
        else if (opt == FROM || opt == TO) {
            if (strcmp(v, "hf"))
                rc = args_error(&a, "%s needs 'hf', 'megatron', 'meta' or 'llmc', got '%s'",
                                opt == FROM ? "--from" : "--to", v);
            *(opt == FROM ? &from : &to) = v;
        } else if (opt == INPUT)
            input = v;
        else if (opt == OUTPUT)
            output = v;
        else if (opt == PEFT)
            peft = v;
        else if (opt == DTYPE) {
            export_opts = 1; /* --to hf and --to megatron */
            if (strcmp(v, "fp32") && strcmp(v, "bf16"))
                rc = args_error(&a, "--dtype needs fp32 or bf16, got '%s'", v);
            o.bf16 = !strcmp(v, "bf16");
        } else if (opt == SHARD) {
            export_opts = hf_only = 1;
            if (!parse_size(v, &o.max_shard_bytes))
                rc = args_error(&a, "--max-shard-size needs a size such as 5GB, 200MB or "
                                    "1048576, got '%s'", v);
        } else if (opt == CONFIG) {
            export_opts = 1;
            config = v;
        } else if (opt == MERGE || opt == ADAPTERS) {
            export_opts = 1;
            *(opt == MERGE ? &merge : &adapters) = 1;
        } else if (opt == EOS) {
            export_opts = hf_only = 1;
            rc = args_int(&a, "--eos-id", v, 0, 0x7fffffff, &o.eos_token_id);
        }
    }
    if (!rc && !from == !to)
        rc = args_error(&a, "give the direction once: --from hf|megatron|meta|llmc (import) or "
                            "--to hf|megatron|meta|llmc (export)");
    if (!rc && (!input || !output))
        rc = args_error(&a, "--input and --output are both needed");
    if (!rc && from && export_opts)
        rc = args_error(&a, "--dtype, --max-shard-size, --eos-id and --config apply to --to hf");
    if (!rc && (to || megatron || meta || llmc) && peft)
        rc = args_error(&a, "--adapters PEFT_DIR applies to --from hf");
    if (!rc && !megatron && mlm_iter >= 0)
        rc = args_error(&a, "--iteration N applies to --from megatron");
    if (!rc && !to_mlm && (tp || pp))
        rc = args_error(&a, "--tp and --pp apply to --to megatron");
    if (!rc && to_mlm && (merge || adapters || hf_only))
        rc = args_error(&a, "--to megatron takes --config, --dtype, --tp and --pp (not "
                        "--max-shard-size, --eos-id, --merge-lora or --adapters-only)");
    if (!rc && !to_meta && mp)
        rc = args_error(&a, "--mp applies to --to meta");
    if (!rc && to_meta && (merge || adapters || hf_only || config))
        rc = args_error(&a, "--to meta takes --dtype and --mp (not --config, --max-shard-size, "
                        "--eos-id, --merge-lora or --adapters-only)");
    if (!rc && to_llmc && (merge || adapters || hf_only || config))
        rc = args_error(&a, "--to llmc takes --dtype (not --config, --max-shard-size, --eos-id, "
                        "--merge-lora or --adapters-only)");
    if (!rc && merge && adapters)
        rc = args_error(&a, "--merge-lora and --adapters-only exclude each other");
    char base[4200];
    int imported = to && input && !config && infer_lora_base(input, base, sizeof base);
    if (!rc && merge && !config && !imported)
        rc = args_error(&a, "--merge-lora needs --config: the LoRA run's config (finetune.lora, "
                        "finetune.load: the base the adapters are merged into)");
    if (rc)
        return rc;
    tr_config cfg;
    int have_cfg = 0;
    if (config || adapters || merge) {
        if ((rc = config ? tr_config_load(config, NULL, 0, &cfg)
                         : infer_lora_run_config(input, imported ? base : NULL, &cfg))) {
            fprintf(stderr, "trident convert: %s\n", tr_errmsg());
            return 2;
        }
        have_cfg = 1;
        o.model = &cfg.model;
    }
    /* the run's tokenizer goes with the export, as transformers' save_pretrained keeps it */
    const char *files[7] = {NULL};
    char *tok_config = NULL;
    if (config && to && !strcmp(cfg.data.tokenizer_type, "HFTokenizer")) {
        tok_config = tr_tokenizer_config_path(cfg.data.tokenizer_model);
        int n = 0;
        files[n++] = cfg.data.tokenizer_model, files[n++] = "tokenizer.json";
        if (tok_config && !access(tok_config, F_OK))
            files[n++] = tok_config, files[n++] = "tokenizer_config.json";
        o.files = files;
    } else if (config && to && !strcmp(cfg.data.tokenizer_type, "GPT2BPETokenizer")) {
        files[0] = cfg.data.vocab_file, files[1] = "vocab.json";
        files[2] = cfg.data.merge_file, files[3] = "merges.txt";
        o.files = files;
    }
    double t0 = tr_now();
    tr_model_config m = {0};
    int iteration = 0;
    tr_hf_lora_import li;
    tr_megatron_info mi;
    tr_meta_info fi;
    tr_llmc_info ci;
    if (llmc)
        rc = tr_llmc_import(input, output, &m, &ci);
    else if (to_llmc)
        rc = tr_llmc_export(input, output, o.bf16, &iteration, &ci);
    else if (meta)
        rc = tr_meta_import(input, output, &m, &fi);
    else if (to_meta)
        rc = tr_meta_export(input, output, mp ? mp : 1, o.bf16, &iteration, &fi);
    else if (megatron)
        rc = tr_megatron_import(input, mlm_iter, output, &m, &mi);
    else if (to_mlm)
        rc = tr_megatron_export(input, output, tp ? tp : 1, pp ? pp : 1, o.bf16,
                                config ? &cfg.model : NULL, &iteration);
    else if (peft)
        rc = tr_hf_import_lora(input, peft, output, &m, &li);
    else if (merge || adapters)
        rc = tr_hf_export_lora(input, output, &cfg, merge, &o, &iteration);
    else
        rc = from ? tr_hf_import(input, output, &m) : tr_hf_export(input, output, &o, &iteration);
    free(tok_config);
    if (have_cfg)
        tr_config_free(&cfg);
    if (rc) {
        fprintf(stderr, "trident convert: %s\n", tr_errmsg());
        return rc == TR_ERR_INVALID || rc == TR_ERR_CONFIG ? 2 : 1;
    }
    if (llmc || to_llmc) {
        if (llmc)
            printf("trident convert: %s (llm.c GPT-2, version %d: %s, padded vocabulary %d) -> %s "
                   "(release checkpoint) in %.2f s\n", input, ci.version,
                   ci.version == 5 ? "bf16" : "fp32", ci.padded_vocab, output, tr_now() - t0);
        else
            printf("trident convert: %s (iteration %d) -> %s (llm.c GPT-2, version %d: %s, padded "
                   "vocabulary %d) in %.2f s\n", input, iteration, output, ci.version,
                   ci.version == 5 ? "bf16" : "fp32", ci.padded_vocab, tr_now() - t0);
        if (llmc)
            print_model_section(&m);
    } else if (meta || to_meta) {
        printf("trident convert: %s (%s) -> %s (%s) in %.2f s\n", input,
               meta ? "Meta's Llama" : "checkpoint", output, meta ? "release checkpoint"
               : "Meta's Llama", tr_now() - t0);
        printf("# %d model-parallel file%s, %s weights%s%s\n", fi.mp, fi.mp > 1 ? "s" : "",
               fi.dtype, !fi.tied ? "" : meta ? ", tied head (no output.weight)"
                                             : ", tied head (output.weight: the embedding's copy)",
               fi.tokenizer ? ", tokenizer.model copied" : "");
        if (meta)
            print_model_section(&m);
        if (to_meta && fi.positions != fi.import_positions) /* (no max_seq_len in params.json) */
            printf("# the model has %d positions; an import of %s takes %d (Meta's default for "
                   "its rope): set model.max_position_embeddings to %d in the run's config\n",
                   fi.positions, output, fi.import_positions, fi.positions);
        char tok[4200];
        snprintf(tok, sizeof tok, "%s/tokenizer.model", output);
        const char *type = meta && fi.tokenizer ? tr_tokenizer_model_type(tok) : NULL;
        if (type) /* (sentencepiece's: Llama2Tokenizer; Llama 3's tiktoken file: Llama3Tokenizer) */
            printf("# generate / eval: --tokenizer-type %s --tokenizer-model %s\n", type, tok);
    } else if (megatron) {
        char which[64], chunks[48] = "";
        snprintf(which, sizeof which, mi.release ? "release" : "iteration %d", mi.iteration);
        if (mi.vp > 1)
            snprintf(chunks, sizeof chunks, ", %d virtual chunks", mi.vp);
        printf("trident convert: %s (Megatron-LM %s%s, checkpoint_version %.1f, %s names, TP "
               "%d, PP %d%s) -> %s (release checkpoint) in %.2f s\n", input, which,
               mi.dist ? ", --ckpt-format torch_dist" : "", mi.version,
               mi.mcore ? "megatron-core" : "legacy model", mi.tp, mi.pp, chunks, output,
               tr_now() - t0);
        if (m.vocab_size != mi.padded_vocab)
            printf("# the real vocabulary (args.vocab_size %d) of the %d padded rows is kept\n",
                   m.vocab_size, mi.padded_vocab);
        print_model_section(&m);
        printf("  make_vocab_size_divisible_by: %d\n  init_method_std: %.9g\n",
               m.make_vocab_size_divisible_by, m.init_method_std);
    } else if (to_mlm) {
        printf("trident convert: %s (iteration %d) -> %s (Megatron-LM release, TP %d, PP %d, "
               "megatron-core names, %s) in %.2f s\n", input, iteration, output, tp ? tp : 1,
               pp ? pp : 1, o.bf16 ? "bf16" : "fp32", tr_now() - t0);
    } else if (from && peft) {
        printf("trident convert: %s + %s -> %s (the adapters' release checkpoint; %s/base: the "
               "base's) in %.2f s\n", input, peft, output, output, tr_now() - t0);
        print_model_section(&m);
        print_lora_sections(output, &li);
    } else if (from) {
        printf("trident convert: %s -> %s (release checkpoint) in %.2f s\n", input, output,
               tr_now() - t0);
        print_model_section(&m);
    } else {
        printf("trident convert: %s (iteration %d) -> %s (%s%s) in %.2f s\n", input, iteration,
               output, o.bf16 ? "bf16" : "fp32",
               o.files ? ", with the run's tokenizer" : "", tr_now() - t0);
    }
    return 0;
}
