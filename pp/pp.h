/* pp/ — pipeline parallelism, the pure parts: how layers are split over stages, the schedule
 * of each stage as a list of operations, a checker that runs all stages' lists together, and
 * an event simulation that times them. No communication happens here: the runner
 * (pp/runner.h) executes these lists over point-to-point sends, and the planner reuses the
 * simulation.
 *
 * Contract:
 *  - Partition. P stages, v model chunks per stage (v = 1 unless interleaved): the model's
 *    layers form B = P*v contiguous blocks, one per VIRTUAL stage vs = c*P + r (chunk c of
 *    stage r holds block c*P + r). Default split: each block gets num_layers / B layers and the
 *    remainder R goes one each to the R MIDDLE blocks (blocks (B-R)/2 .. (B-R)/2 + R - 1,
 *    rounding down, so an odd leftover block is at the end), so the first and last stages,
 *    which also hold the embedding and the loss head, stay light (22 layers on 4 stages ->
 *    [5, 6, 6, 5]; 23 -> [6, 6, 6, 5]). An explicit list (parallel.pipeline_layers)
 *    has one entry per virtual stage, in virtual-stage order (for v = 1: per stage). A block
 *    with 0 layers, a list of the wrong length or one whose sum is not num_layers is
 *    TR_ERR_CONFIG with a message naming the values. The embedding lives on virtual stage 0
 *    (stage 0, chunk 0), the loss on virtual stage B-1 (stage P-1, chunk v-1).
 *  - Schedules (tr_pp_schedule_build): for (P, stage, M micro-batches, kind, v) the ordered
 *    ops of that stage: F/B (micro-batch, chunk) and the communication ops recv_forward
 *    (activation from the previous virtual stage), send_forward, recv_backward (gradient from
 *    the next virtual stage), send_backward, each with its peer stage. Comm ops chained with
 *    `with_next` form one BATCH that a runner posts together (isend/irecv, then wait for all:
 *    Megatron's batch_isend_irecv / an NCCL group); inside a batch the order is Megatron's
 *    (even stages: send_fwd, recv_fwd, send_bwd, recv_bwd; odd stages: recv_fwd, send_fwd,
 *    recv_bwd, send_bwd). Sends and receives between two stages are in the same order on
 *    both sides, so a FIFO transport without tags (NCCL) pairs them correctly.
 *      gpipe:       all M forwards, then all M backwards in REVERSE micro-batch order
 *                   (M-1 first, as autograd of the whole batch would; the last stage starts
 *                   backward on the activation it just made). Peak stored activations = M.
 *      1f1b:        Megatron's forward_backward_pipelining_without_interleaving: stage r runs
 *                   min(P-r-1, M) warm-up forwards, then one forward + one backward, then the
 *                   remaining backwards. Peak stored activations = min(P-r, M).
 *      interleaved: Megatron's forward_backward_pipelining_with_interleaving with v chunks:
 *                   virtual micro-batch k runs micro-batch (k / (P*v))*P + k % P on chunk
 *                   (k % (P*v)) / P (backward: chunk v-1-that); warm-up (P-r-1)*2 + (v-1)*P
 *                   capped at M*v, all warm-up when M == P (as Megatron; the checker passes
 *                   without that special case too). Needs P >= 2, v >= 2,
 *                   M % P == 0. Megatron's recv flags are reproduced (stage 0 / stage P-1
 *                   receive what the other end of the ring sends in the same iteration).
 *  - Checker (tr_pp_simulate / tr_pp_check): runs all stages' lists together. Sends and
 *    receives match in FIFO order per ordered pair of stages (no tags); each matched pair must
 *    carry the same (direction, micro-batch, virtual stage). Communication model:
 *      TR_PP_COMM_RENDEZVOUS: every comm op alone, blocking, a send completes only when the
 *                             receiver has posted the matching recv (the strictest);
 *      TR_PP_COMM_BATCHED:    rendezvous, but a batch is posted as a whole (what a runner
 *                             with batch_isend_irecv / NCCL groups does);
 *      TR_PP_COMM_BUFFERED:   sends never block (the weakest).
 *    All three kinds pass all three models for every P <= 16, M <= 64 (v <= 4 interleaved):
 *    a runner may post the ops one by one with blocking send/recv, in list order.
 *    Dependencies: F(mb, vs) needs the activation of (mb, vs-1) received (vs = 0: none);
 *    B(mb, vs) needs its own F and the gradient of (mb, vs+1) received (vs = B-1: only F);
 *    a send needs the F/B that produced its tensor done. Every (mb, vs) runs F and B exactly
 *    once on its own stage. Violations and deadlocks are TR_ERR_INVALID naming stage, op
 *    index and op. Peak stored activations per stage = max over time of forwards done whose
 *    backward is not (in chunk activations).
 *  - Event simulation (same call, with costs): compute ops take tf / tb (one chunk, per stage),
 *    a matched send/recv completes p2p after both sides are posted; stages run their lists in
 *    order. Bubble fraction = idle stage-time / (P * makespan). With equal stage times and
 *    p2p = 0 it equals (P-1)/(M+P-1) for gpipe and 1f1b and (P-1)/(v*M+P-1) for interleaved
 *    (tests assert this for tb/tf = 1/2, 1, 2, 3); communication cost or unequal stages
 *    only add to it. */
#ifndef TR_PP_H
#define TR_PP_H

#include <stddef.h>

#include "yaml/config.h"

#define TR_PP_MAX_STAGES 256   /* P */
#define TR_PP_MAX_VIRTUAL 1024 /* P * v */
#define TR_PP_MAX_VIRTUAL_MB (1 << 24) /* M * v */

/* ---- partition ---- */

typedef struct {
    int num_layers, P, v;
    int first[TR_PP_MAX_VIRTUAL]; /* [vs]: first layer of virtual stage vs = c*P + r */
    int count[TR_PP_MAX_VIRTUAL]; /* [vs]: number of layers, >= 1 */
} tr_pp_partition;

/* Split num_layers over P stages x v chunks. explicit_layers: NULL (n_explicit 0) for the
 * default split, else n_explicit = P*v entries in virtual-stage order. */
TR_MUST_CHECK int tr_pp_partition_layers(int num_layers, int P, int v, const int *explicit_layers,
                           int n_explicit, tr_pp_partition *out);
/* From a config: model.num_layers, parallel.pipeline_model_parallel_size, pipeline_layers,
 * and v = virtual_pipeline_model_parallel_size when pipeline_schedule is "interleaved". */
TR_MUST_CHECK int tr_pp_partition_from_config(const tr_config *cfg, tr_pp_partition *out);

static inline int tr_pp_layer_first(const tr_pp_partition *p, int stage, int chunk)
{
    return p->first[chunk * p->P + stage];
}
static inline int tr_pp_layer_count(const tr_pp_partition *p, int stage, int chunk)
{
    return p->count[chunk * p->P + stage];
}
static inline int tr_pp_has_embedding(const tr_pp_partition *p, int stage, int chunk)
{
    (void)p;
    return stage == 0 && chunk == 0;
}
static inline int tr_pp_has_loss(const tr_pp_partition *p, int stage, int chunk)
{
    return stage == p->P - 1 && chunk == p->v - 1;
}

/* ---- schedules ---- */

typedef enum { TR_PP_1F1B = 0, TR_PP_GPIPE = 1, TR_PP_INTERLEAVED = 2 } tr_pp_kind;

/* "1f1b" | "gpipe" | "interleaved"; anything else is TR_ERR_CONFIG naming the value. */
TR_MUST_CHECK int tr_pp_kind_parse(const char *name, tr_pp_kind *out);
const char *tr_pp_kind_name(tr_pp_kind kind);
/* TR_ERR_CONFIG unless 1 <= P <= TR_PP_MAX_STAGES, M >= 1, v == 1 for gpipe/1f1b, and for
 * interleaved P >= 2, v >= 2, M % P == 0; P*v <= TR_PP_MAX_VIRTUAL, M*v <= TR_PP_MAX_VIRTUAL_MB. */
TR_MUST_CHECK int tr_pp_validate(int P, int M, tr_pp_kind kind, int v);

typedef enum {
    TR_PP_OP_FORWARD,
    TR_PP_OP_BACKWARD,
    TR_PP_OP_RECV_FORWARD,  /* activation from the previous virtual stage */
    TR_PP_OP_SEND_FORWARD,  /* activation to the next virtual stage */
    TR_PP_OP_RECV_BACKWARD, /* gradient from the next virtual stage */
    TR_PP_OP_SEND_BACKWARD, /* gradient to the previous virtual stage */
} tr_pp_op_kind;

typedef struct {
    tr_pp_op_kind kind;
    int stage;     /* the stage running the op */
    int mb;        /* micro-batch, 0..M-1 */
    int chunk;     /* this stage's model chunk the tensor belongs to (0..v-1): a send carries
                    * the output (forward) or input gradient (backward) of this chunk; a recv
                    * brings the input (forward) or output gradient (backward) of this chunk */
    int peer;      /* comm ops: the other stage; compute ops: -1 */
    int with_next; /* comm ops: 1 = same batch as the next op (posted together) */
} tr_pp_op;

static inline int tr_pp_op_is_comm(tr_pp_op_kind k) { return k >= TR_PP_OP_RECV_FORWARD; }
static inline int tr_pp_op_is_send(tr_pp_op_kind k)
{
    return k == TR_PP_OP_SEND_FORWARD || k == TR_PP_OP_SEND_BACKWARD;
}

typedef struct {
    tr_pp_kind kind;
    int P, M, v, stage;
    int n_warmup;   /* forwards before the first backward */
    int n_ops;
    tr_pp_op *ops;  /* [n_ops], owned */
} tr_pp_schedule;

/* The op list of one stage. Validates like tr_pp_validate; 0 <= stage < P. */
TR_MUST_CHECK int tr_pp_schedule_build(int P, int stage, int M, tr_pp_kind kind, int v, tr_pp_schedule *out);
/* All P stages into stages[0..P-1]; on failure nothing is left allocated. */
TR_MUST_CHECK int tr_pp_schedule_build_all(int P, int M, tr_pp_kind kind, int v, tr_pp_schedule *stages);
void tr_pp_schedule_free(tr_pp_schedule *s);
void tr_pp_schedule_free_all(tr_pp_schedule *stages, int P);

/* Peak number of stored activations (forwards whose backward has not run) of one stage. */
int tr_pp_peak_activations(const tr_pp_schedule *s);
/* Short label: "F3", "B3" ("F3.1" with chunks when v > 1); comm ops "sendF3>1",
 * "recvF3<0", "sendB3>0", "recvB3<1" (chunk suffix likewise). Returns the length. */
int tr_pp_op_label(const tr_pp_op *op, int v, char *buf, size_t n);
const char *tr_pp_op_kind_name(tr_pp_op_kind kind); /* "forward", "recv_forward", ... */

/* Closed-form bubble fraction: (P-1)/(M+P-1), interleaved (P-1)/(v*M+P-1). */
double tr_pp_bubble_theory(int P, int M, tr_pp_kind kind, int v);

/* ---- checker and event simulation ---- */

typedef enum {
    TR_PP_COMM_RENDEZVOUS = 0,
    TR_PP_COMM_BATCHED = 1,
    TR_PP_COMM_BUFFERED = 2,
} tr_pp_comm_model;

typedef struct {
    double tf, tb;               /* one forward / backward of one model chunk */
    const double *tf_stage;      /* optional [P]: per-stage forward time, overrides tf */
    const double *tb_stage;      /* optional [P]: per-stage backward time, overrides tb */
    double p2p;                  /* a send/recv pair takes this long once both are posted */
} tr_pp_costs;

typedef struct {
    double makespan;                          /* end of the last op of any stage */
    double bubble_fraction;                   /* idle stage-time / (P * makespan) */
    double busy[TR_PP_MAX_STAGES];            /* compute time per stage */
    int peak_activations[TR_PP_MAX_STAGES];   /* per stage */
    long n_ops;                               /* all stages' ops */
} tr_pp_sim_result;

/* Run stages[0..P-1] together under `model`, checking everything in the contract.
 * costs NULL = tf 1, tb 2, p2p 0. op_start/op_end: NULL, or P arrays of stages[s].n_ops
 * doubles that receive each op's start and end time. out may be NULL. */
TR_MUST_CHECK int tr_pp_simulate(const tr_pp_schedule *stages, int P, tr_pp_comm_model model,
                   const tr_pp_costs *costs, tr_pp_sim_result *out, double *const *op_start,
                   double *const *op_end);
static inline int tr_pp_check(const tr_pp_schedule *stages, int P, tr_pp_comm_model model)
{
    return tr_pp_simulate(stages, P, model, NULL, NULL, NULL, NULL);
}
/* For the planner: build all stages of (P, M, kind, v), simulate them under batched
 * rendezvous with `costs` (NULL = tf 1, tb 2, p2p 0), free them. */
TR_MUST_CHECK int tr_pp_simulate_kind(int P, int M, tr_pp_kind kind, int v, const tr_pp_costs *costs,
                        tr_pp_sim_result *out);

#endif
