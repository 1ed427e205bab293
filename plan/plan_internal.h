/* plan/'s internals shared by its files (not part of the contract in plan/plan.h). */
#ifndef TR_PLAN_INTERNAL_H
#define TR_PLAN_INTERNAL_H

#include "plan/plan.h"

/* The preset's compiled-in measured GEMM table (plan/gemm/PRESET.inc) into c. */
void tr_plan_attach_gemm_table(tr_plan_cluster *c);

/* ---- pipeline: the pp/ op lists of one (P, M, kind, v), paired once, simulated often ---- */

/* One op of the compiled lists: what the simulation needs. */
typedef struct {
    int partner;           /* comm ops: the matched op (global index); compute: -1 */
    short peer;            /* comm ops: the other stage; compute: -1 */
    short link;            /* comm ops: the pair of stages crossed, named by the lower stage
                            * of (s, s+1 mod P), indexing the P2P costs */
    unsigned char kind;    /* tr_pp_op_kind */
    unsigned char batch;   /* first comm op of a batch: its length (ops joined by with_next) */
    unsigned short chunk;  /* compute ops: the stage's model chunk */
} plan_op;

typedef struct {
    int P, M, v;
    tr_pp_kind kind;
    long *offset;           /* [P+1] global op index of each stage's first op */
    long total;
    plan_op *ops;           /* [total], stage by stage in list order */
    int *peak;              /* [P]: peak stored chunks (plan_schedule_peaks) */
    long cap_ops;           /* allocated: ops, and the pairing scratch */
    int cap_p;              /* allocated: offset (+1), peak */
    int *scratch;           /* [cap_ops + 4 cap_p]: pairing queues */
} plan_pipe;

/* Build with pp/ (validated there), pair, compile; out's buffers (a pipe freed with
 * plan_pipe_free, or zeroed) are reused when large enough. */
TR_MUST_CHECK int plan_pipe_build(int P, int M, tr_pp_kind kind, int v, plan_pipe *out);
void plan_pipe_free(plan_pipe *p);

typedef struct {
    double makespan;
    double bubble_fraction; /* idle stage-time (waits and transfers) / (P x makespan) */
    /* per stage [P]: */
    double *end;      /* end of its last op */
    double *end_b;    /* end of its last backward */
    double *busy;     /* compute */
    double *transfer; /* time blocked in P2P windows while a transfer ran (exposed P2P) */
    double *wait;     /* time blocked waiting for the peer to post (bubble) */
} plan_pipe_out;

/* Scratch of the simulation, reused across calls (grows). */
typedef struct {
    double *post, *done;
    long cap;
    double *stage; /* 5 x P for plan_pipe_out */
    int cap_p;
} plan_sim_ws;

/* Event simulation with tr_pp_simulate's batched rendezvous (batched = 1) or rendezvous
 * (0): compute ops of stage s, chunk c take tf[s v + c] / tb[s v + c], a matched send/recv
 * pair completes p2p[link] after both sides are posted. out's arrays point into ws. */
TR_MUST_CHECK int plan_pipe_run(const plan_pipe *p, const double *tf, const double *tb,
                                const double *p2p, int batched, plan_sim_ws *ws,
                                plan_pipe_out *out);
void plan_sim_ws_free(plan_sim_ws *ws);

/* ---- evaluation workspace: the search keeps one for all its layouts ---- */

#define PLAN_PIPE_CACHE 6

typedef struct tr_plan_ws {
    plan_pipe pipes[PLAN_PIPE_CACHE];
    int n_pipes, next;
    plan_sim_ws sim;
    /* the last simulation, reused when the next has the same inputs (the search's ZeRO-1
     * on/off twins change the step, not the pipeline) */
    int memo_valid, memo_P, memo_M, memo_v, memo_batched;
    tr_pp_kind memo_kind;
    double *memo_in;  /* [P(2v + 1)]: tf, tb, p2p */
    double *memo_out; /* [5P + 2]: the results and makespan, bubble */
    int memo_cap;
    /* dp/'s bucket layouts already asked for (direct-mapped by the inputs' hash) */
    struct plan_dp_memo {
        int used, dp, zero, overlap, n_buckets;
        double bucket_mb;
        size_t n, al_start, al_len, shard;
    } dp_memo[256];
    /* the node report of the last (world, TP, PP, order, GPUs per node) */
    int rep_valid, rep_key[6];
    tr_node_report rep;
} tr_plan_ws;

void plan_ws_free(tr_plan_ws *ws);
/* Peak stored chunks per stage of (P, M, kind, v) without building the lists: the warm-up
 * forwards, and one more when a steady phase follows (tests compare it with
 * tr_pp_peak_activations of pp/'s lists). */
void plan_schedule_peaks(int P, int M, tr_pp_kind kind, int v, int *peaks);
/* The op lists of (P, M, kind, v), from the cache or built into it. */
TR_MUST_CHECK int plan_ws_pipe(tr_plan_ws *ws, int P, int M, tr_pp_kind kind, int v,
                               const plan_pipe **out);

/* The event simulation of M micro-batches (the cached op lists). Up to PLAN_SIM_BUDGET
 * stage x chunk x micro-batch units every micro-batch is simulated; a longer pipeline is
 * simulated for m1 >= 8P micro-batches (at least the budget) and m1 + one period (1; the
 * interleaved schedule P), and that period's increments are extended to M: the steady state
 * of the schedule, exact once the pipeline's start-up transient is over. On the planner's
 * stages (equal but for the first and last) it is over within P micro-batches: every layout of
 * the benchmark and Bloom searches gives the whole simulation's step time to 1e-11, and
 * tests/plan/test_plan_pipeline.c checks such stages; stages of very different speeds (which
 * the planner does not make) can take longer to settle. */
#ifndef PLAN_SIM_BUDGET
#define PLAN_SIM_BUDGET 4096
#endif
TR_MUST_CHECK int plan_ws_simulate(tr_plan_ws *ws, int P, int M, tr_pp_kind kind, int v,
                                   const double *tf, const double *tb, const double *p2p,
                                   int batched, plan_pipe_out *out);

/* TR_OK, or TR_ERR_CONFIG saying why L's context parallelism (cp > 1) does not run on its
 * runtime: trident's runs fp32 attention on the CPU backend without experts or LoRA. */
TR_MUST_CHECK int plan_cp_supported(const tr_config *cfg, const tr_plan_cluster *c,
                                    const tr_plan_layout *L);
/* tr_plan_evaluate with a workspace, and (explain != NULL) the per-stage parts. */
TR_MUST_CHECK int plan_evaluate(const tr_config *cfg, const tr_plan_layout *layout, int world,
                                const tr_plan_cluster *c, int time, double train_tokens,
                                tr_plan_ws *ws, tr_plan_result *out, tr_plan_explain *explain);

/* What dp/ makes of one stage's gradient buffer (per rank). */
typedef struct {
    double params;    /* elements of the stage's parameters (under LoRA: base + adapters) */
    double trainable; /* of them with gradients and optimizer state (LoRA: the adapters) */
    int n_buckets;    /* gradient buckets */
    double shard;     /* DP rank 0's optimizer shard (the largest; params without ZeRO-1) */
    /* expert parallelism (EP > 1; all 0 without): of `trainable`, the E/EP experts' elements
     * this rank holds, in a buffer of their own reduced and sharded over EDP = DP/EP (dp/'s
     * layout of it); n_buckets and shard above are then the dense part's, over DP */
    double experts;
    int n_expert_buckets;
    double expert_shard;
} plan_stage_dp;

/* step_time.c: the step time of r->layout (r's world and vocab_padded set) split by `part`
 * into stages with sd[P] (their parameters, buckets and shards), ranks_per_node ranks a node:
 * fills r's time fields (step_time_s, pipeline_s, bubble, links, communication, optimizer)
 * and, with ex, its per-stage parts. ws: the node report, op lists and simulation reused. */
TR_MUST_CHECK int plan_time_model(const tr_config *cfg, const tr_plan_cluster *c,
                                  const tr_pp_partition *part, const plan_stage_dp *sd,
                                  int ranks_per_node, tr_plan_ws *ws, tr_plan_result *r,
                                  tr_plan_explain *ex);

/* ---- costs of one micro-batch on one rank, by part (TR_PLAN_PART_GEMM .. _EP) ---- */

#define PLAN_COST_PARTS (TR_PLAN_PART_EP + 1)
typedef struct {
    double f[PLAN_COST_PARTS], b[PLAN_COST_PARTS];
} plan_cost;

typedef struct {
    const tr_plan_cluster *c;
    const tr_model_config *m;
    const tr_plan_layout *L;
    int vocab_padded;
    double rate;   /* FLOP/s of the flat model (cpu, custom) */
    double ar_tp;  /* one TP all-reduce of the activation T h e */
    double tp_bw, tp_lat; /* the TP link as a rank sees it */
    int cp;               /* context parallelism (1: none): m's seq_length is then the s / CP
                           * tokens a rank holds, and keys the s of the whole sequence */
    double keys;
    double cp_bw, cp_lat; /* the CP link as a rank sees it */
    const tr_finetune_config *ft; /* LoRA (lora_rank > 0): the base frozen, adapters trained */
    int ep;               /* expert parallelism (1: none): E/EP experts a rank */
    double a2a;           /* EP > 1: one all-to-all of the rank's k N routed rows over its EP
                           * group (plan_alltoall_s) */
    double a2a_counts;    /* ... and the one of their per-expert counts (4 E bytes) */
} plan_cost_ctx;

/* LoRA fine-tuning: the base weights frozen (no weight gradients: the linear layers' and the
 * head's backward is their input gradient alone) and rank-r adapters on the targets k (0 qkv,
 * 1 proj, 2 fc1, 3 fc2: formulas.c's plan_lora_target) trained beside them. */
static inline int plan_lora(const plan_cost_ctx *x) { return x->ft && x->ft->lora_rank > 0; }
int plan_lora_target(const tr_finetune_config *ft, int k);
/* The adapters of one layer on T rows (forward, backward: their GEMMs, both factors trained),
 * each target's linear (in -> out, column- or row-parallel over t) with x A^T (T x r) then
 * (x A^T) B^T (T x out) added onto the output; gemm_s(c, M, N, K, accumulate) times one GEMM
 * (costs.c, costs_trident.c), accumulate where it adds onto its output (tp/linear.c's
 * lora_forward and lora_backward: y, dx, dA, dB). */
void plan_lora_cost(const plan_cost_ctx *x, double T,
                    double (*gemm_s)(const tr_plan_cluster *c, double M, double N, double K,
                                     int accumulate),
                    double *fwd, double *bwd);

/* One GEMM (M, N, K) of a cost model, accumulating onto its output or not. */
typedef double (*plan_gemm_fn)(const tr_plan_cluster *c, double M, double N, double K,
                               int accumulate);
/* costs_moe.c: a layer with experts (model.num_experts; plan_moe). The experts' GEMMs on k T
 * routed rows, balanced (k T / E rows each), forward and backward; and what the routing costs
 * (the router's GEMMs, its softmax and top-k, the host copies with their syncs, the rows'
 * gathers and scatters; rows of h e bytes an element), forward and backward. */
static inline int plan_moe(const plan_cost_ctx *x) { return x->m->num_experts > 0; }
void plan_moe_expert_gemms(const plan_cost_ctx *x, double T, plan_gemm_fn gemm_s, double *fwd,
                           double *bwd);
void plan_moe_routing_cost(const plan_cost_ctx *x, double T, double e, plan_gemm_fn gemm_s,
                           double *fwd, double *bwd);

/* ---- expert parallelism (ep.c; Megatron-core 0.8's rules) ---- */

/* L's expert-parallel size, 1 without. */
static inline int plan_ep(const tr_plan_layout *L) { return L->ep > 1 ? L->ep : 1; }
/* A rank holds only its E/EP experts (every runtime: Megatron's and trident's engine). */
static inline int plan_ep_split(const tr_plan_layout *L)
{
    return plan_ep(L) > 1;
}
/* TR_OK, or TR_ERR_CONFIG naming parallel.expert_model_parallel_size: EP > 1 needs experts,
 * divides DP and model.num_experts, and runs without context parallelism. */
TR_MUST_CHECK int plan_ep_check(const tr_config *cfg, const tr_plan_layout *L);
/* TR_OK, or TR_ERR_CONFIG saying why L's EP (> 1) does not run on its runtime: trident's
 * exchanges the rows in host memory, on the CPU backend (yaml/validate_moe.c refuses it with
 * training.device cuda). */
TR_MUST_CHECK int plan_ep_supported(const tr_plan_cluster *c, const tr_plan_layout *L);
/* The config sets parallel.expert_model_parallel_size (file or --set): the search keeps it. */
int plan_ep_pinned(const tr_config *cfg);
/* The EP sizes the search tries for L's DP and CP on c: the config's when pinned, else every
 * divisor of DP dividing model.num_experts (1 alone without experts, with CP, or where the
 * runtime has no EP: plan_ep_supported); at most 32. */
int plan_ep_choices(const tr_config *cfg, const tr_plan_cluster *c, const tr_plan_layout *L,
                    int *eps);
/* Elements of every expert of `layers` layers on one TP rank (formulas.c's MLP, E times; the
 * router not counted: it stays replicated). */
double plan_stage_expert_params(const tr_model_config *m, int tp, int layers);
/* Nodes spanned by the most spread EP group (EP consecutive dp coordinates of one (tp, pp))
 * and EDP group (the D/EP dp coordinates ep, ep + EP, ... of one (tp, pp)), block placement. */
void plan_ep_spans(const tr_topo *topo, int gpus_per_node, int ep, int *ep_nodes,
                   int *edp_nodes);
/* One all-to-all of `bytes` a rank (its share to itself included) over n ranks spread over
 * `nodes` nodes (ceil(n / nodes) a node): (m - 1)/n of it over the intra-node link (intra_bw),
 * (n - m)/n over the node's NICs (inter_bw: what one rank gets of them) at once, the slower
 * of the two, plus (n - 1) latencies of the farthest link; n <= 1: 0. */
double plan_alltoall_s(double bytes, int n, int nodes, double intra_bw, double intra_lat,
                       double inter_bw, double inter_lat);
/* Expert parallelism's all-to-alls of one layer and one micro-batch (x->ep > 1): forward the
 * counts, the routed rows out to their experts' owners and the outputs back; backward the
 * output gradients out and the input gradients back; full recompute's forward again. */
void plan_ep_cost(const plan_cost_ctx *x, plan_cost *o);

/* Context parallelism's collectives of one layer and one micro-batch (x->cp > 1): forward
 * the group's K and V all-gathered (trident: fp32), backward gathered again and their
 * gradient reduce-scattered, full recompute's forward one more gather. */
void plan_cp_cost(const plan_cost_ctx *x, double e, plan_cost *o);
/* The keys each query row sees on average under context parallelism's causal balance:
 * x->keys, else the sequence. */
static inline double plan_keys(const plan_cost_ctx *x)
{
    return x->cp > 1 ? x->keys : x->m->seq_length;
}

static inline void plan_cost_clear(plan_cost *o)
{
    for (int k = 0; k < PLAN_COST_PARTS; k++)
        o->f[k] = o->b[k] = 0;
}
int plan_shape_model(const tr_plan_cluster *c);
/* costs_trident.c: trident's CUDA kernels as written (runtime trident, a GPU preset, bf16)
 * instead of Megatron's fused ones; plan_trident_gemm_s: one bf16-mode GEMM on fp32
 * operands (staged), accumulating (beta 1) or not. */
static inline int plan_trident_kernels(const plan_cost_ctx *x)
{
    return x->L->trident_kernels && x->L->bf16 && plan_shape_model(x->c);
}
void plan_layer_cost_trident(const plan_cost_ctx *x, plan_cost *out);
/* Dropout on trident's kernels (L->dropout: the config's or --dropout, which is both): hidden
 * dropout where model.hidden_dropout > 0, attention dropout where attention_dropout > 0. */
static inline int plan_hidden_dropout(const plan_cost_ctx *x)
{
    const tr_model_config *m = x->m;
    return x->L->dropout && (m->hidden_dropout > 0 || !(m->attention_dropout > 0));
}
static inline int plan_attention_dropout(const plan_cost_ctx *x)
{
    const tr_model_config *m = x->m;
    return x->L->dropout && (m->attention_dropout > 0 || !(m->hidden_dropout > 0));
}
/* Seconds of `blocks` Philox 4x32-10 blocks at c's int_ops (0 where it has none). */
double plan_philox_s(const tr_plan_cluster *c, double blocks);
/* One hidden-dropout kernel of trident's on n fp32 elements (kernels/cuda/dropout.cu: read and
 * write 4 bytes an element, one Philox block a 4): the slower of its bytes and its blocks,
 * plus a kernel's overhead. */
double plan_trident_dropout_s(const tr_plan_cluster *c, double n);
void plan_output_cost_trident(const plan_cost_ctx *x, plan_cost *out);
double plan_trident_gemm_s(const tr_plan_cluster *c, double m, double n, double k, int accumulate);
void plan_layer_cost(const plan_cost_ctx *x, plan_cost *out);
void plan_embedding_cost(const plan_cost_ctx *x, plan_cost *out);
void plan_output_cost(const plan_cost_ctx *x, plan_cost *out);
/* Seconds of the optimizer step of a rank holding `params` elements with a shard of
 * `shard` (zeroing the gradients of all, AdamW on the shard). */
double plan_optimizer_s(const tr_plan_cluster *c, double params, double shard, int bf16);

#endif
