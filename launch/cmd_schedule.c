/* `trident schedule --pp P --microbatches M [--schedule KIND] [--vpp V] [--json] [--comm]`:
 * each stage's op list, a timeline from the event simulation (forward 1 slot, backward 2,
 * free communication) and the bubble fraction next to the closed formula. */
#include "launch/commands.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "launch/args.h"
#include "pp/pp.h"

#define TIMELINE_MAX_WIDTH 20000 /* characters per row; wider timelines are left out */

static void schedule_usage(FILE *f)
{
    fprintf(f,
            "usage: trident schedule --pp P --microbatches M [options]\n"
            "\n"
            "Print the pipeline schedule of every stage: its forward (F) and backward (B)\n"
            "ops by micro-batch (F3.1 = micro-batch 3 on model chunk 1 when interleaved), a\n"
            "timeline from an event simulation (one slot = one forward, a backward takes 2,\n"
            "communication is free; '.' = idle), the bubble fraction (idle share of all\n"
            "stage-time) next to the closed formula, and each stage's peak number of stored\n"
            "activations.\n"
            "\n"
            "options:\n"
            "  --pp P                pipeline stages (>= 1)\n"
            "  --microbatches M      micro-batches per step (>= 1)\n"
            "  --schedule KIND       1f1b (default) | gpipe | interleaved\n"
            "  --vpp V               model chunks per stage, interleaved only (>= 2; M must be\n"
            "                        a multiple of P)\n"
            "  --json                one JSON object: {\"stages\": [[\"F0\",\"F1\",\"B0\",...],\n"
            "                        ...], \"bubble_fraction\", \"bubble_fraction_theory\",\n"
            "                        \"makespan\", \"peak_activations\", ...}\n"
            "  --comm                also list the communication ops (sendF3>1 = send the\n"
            "                        activation of micro-batch 3 to stage 1, recvB3<2 = receive\n"
            "                        its gradient from stage 2; [..] = one batch posted\n"
            "                        together); with --json as \"ops\"\n"
            "  -h, --help            this text\n"
            "\n"
            "Exit status: 0 success, 2 bad usage.\n");
}

typedef struct {
    int P, M, v, json, comm, have_vpp;
    tr_pp_kind kind;
} sched_args;

/* Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, sched_args *a)
{
    enum { PP, MICROBATCHES, SCHEDULE, VPP, JSON, COMM };
    static const arg_opt options[] = {
        [PP] = {.name = "--pp", .kind = ARG_VALUE},
        [MICROBATCHES] = {.name = "--microbatches", .kind = ARG_VALUE},
        [SCHEDULE] = {.name = "--schedule", .kind = ARG_VALUE},
        [VPP] = {.name = "--vpp", .kind = ARG_VALUE},
        [JSON] = {.name = "--json", .kind = ARG_FLAG},
        [COMM] = {.name = "--comm", .kind = ARG_FLAG},
        {.name = NULL},
    };
    arg_parser p = {.cmd = "trident schedule", .opts = options, .usage = schedule_usage,
                 .unknown = "unknown argument '%s' (see --help)", .argc = argc, .argv = argv};
    int have_pp = 0, have_m = 0, rc = 0, o;
    const char *v;
    while (!rc && (o = args_next(&p, &v)) != ARGS_END) {
        if (o == ARGS_HELP || o == ARGS_ERROR)
            return o == ARGS_HELP ? 0 : 2;
        if (o == ARGS_POSITIONAL) {
            rc = args_error(&p, "unknown argument '%s' (see --help)", v);
        } else if (o == JSON || o == COMM) {
            *(o == JSON ? &a->json : &a->comm) = 1;
        } else if (o == SCHEDULE) {
            if (tr_pp_kind_parse(v, &a->kind))
                rc = args_error(&p, "--schedule: %s", tr_errmsg());
        } else {
            rc = args_int(&p, options[o].name, v, INT_MIN, INT_MAX,
                             o == PP ? &a->P : o == MICROBATCHES ? &a->M : &a->v);
            *(o == PP ? &have_pp : o == MICROBATCHES ? &have_m : &a->have_vpp) = 1;
        }
    }
    if (rc)
        return rc;
    if (!have_pp || !have_m)
        return args_error(&p, "%s is required (see --help)",
                             have_pp ? "--microbatches M" : "--pp P");
    if (a->kind == TR_PP_INTERLEAVED && !a->have_vpp)
        return args_error(&p, "--schedule interleaved needs --vpp V (V >= 2 model chunks per "
                                 "stage)");
    if (a->kind != TR_PP_INTERLEAVED && a->have_vpp && a->v != 1)
        return args_error(&p, "--vpp %d needs --schedule interleaved", a->v);
    if (tr_pp_validate(a->P, a->M, a->kind, a->v))
        return args_error(&p, "%s", tr_errmsg());
    return -1;
}

static void print_json(const sched_args *a, const tr_pp_schedule *st, const tr_pp_sim_result *r)
{
    tr_json j;
    char label[64];
    tr_json_begin(&j, stdout);
    tr_json_object_begin(&j, NULL);
    tr_json_string(&j, "schedule", tr_pp_kind_name(a->kind));
    tr_json_int(&j, "pp", a->P);
    tr_json_int(&j, "microbatches", a->M);
    tr_json_int(&j, "vpp", a->v);
    tr_json_array_begin(&j, "stages");
    for (int s = 0; s < a->P; s++) {
        tr_json_array_begin(&j, NULL);
        for (int i = 0; i < st[s].n_ops; i++)
            if (!tr_pp_op_is_comm(st[s].ops[i].kind)) {
                tr_pp_op_label(&st[s].ops[i], a->v, label, sizeof label);
                tr_json_string(&j, NULL, label);
            }
        tr_json_array_end(&j);
    }
    tr_json_array_end(&j);
    if (a->comm) {
        tr_json_array_begin(&j, "ops");
        for (int s = 0; s < a->P; s++) {
            tr_json_array_begin(&j, NULL);
            for (int i = 0; i < st[s].n_ops; i++) {
                const tr_pp_op *op = &st[s].ops[i];
                tr_json_object_begin(&j, NULL);
                tr_json_string(&j, "op", tr_pp_op_kind_name(op->kind));
                tr_json_int(&j, "mb", op->mb);
                tr_json_int(&j, "chunk", op->chunk);
                if (tr_pp_op_is_comm(op->kind)) {
                    tr_json_int(&j, "peer", op->peer);
                    tr_json_bool(&j, "with_next", op->with_next);
                }
                tr_json_object_end(&j);
            }
            tr_json_array_end(&j);
        }
        tr_json_array_end(&j);
    }
    tr_json_array_begin(&j, "warmup");
    for (int s = 0; s < a->P; s++)
        tr_json_int(&j, NULL, st[s].n_warmup);
    tr_json_array_end(&j);
    tr_json_array_begin(&j, "peak_activations");
    for (int s = 0; s < a->P; s++)
        tr_json_int(&j, NULL, r->peak_activations[s]);
    tr_json_array_end(&j);
    tr_json_double(&j, "makespan", r->makespan);
    tr_json_double(&j, "bubble_fraction", r->bubble_fraction);
    tr_json_double(&j, "bubble_fraction_theory", tr_pp_bubble_theory(a->P, a->M, a->kind, a->v));
    tr_json_string(&j, "timing", "forward 1, backward 2 per chunk, p2p 0");
    tr_json_string(&j, "comm_model", "rendezvous; batches posted together");
    tr_json_object_end(&j);
    fputc('\n', stdout);
}

static void print_ops(const sched_args *a, const tr_pp_schedule *st)
{
    char label[64];
    for (int s = 0; s < a->P; s++) {
        printf("stage %*d:", a->P > 10 ? 2 : 1, s);
        int in_batch = 0;
        for (int i = 0; i < st[s].n_ops; i++) {
            const tr_pp_op *op = &st[s].ops[i];
            int comm = tr_pp_op_is_comm(op->kind);
            if (comm && !a->comm)
                continue;
            tr_pp_op_label(op, a->v, label, sizeof label);
            int opens = comm && op->with_next && !in_batch;
            printf(" %s%s", opens ? "[" : "", label);
            if (opens)
                in_batch = 1;
            if (in_batch && !op->with_next) {
                putchar(']');
                in_batch = 0;
            }
        }
        putchar('\n');
    }
}

/* One row per stage; each slot is `cw` characters; an op starts with its label. */
static void print_timeline(const sched_args *a, const tr_pp_schedule *st, double *const *t0,
                           double *const *t1, double makespan)
{
    char label[64];
    int cw = 1;
    for (int s = 0; s < a->P; s++)
        for (int i = 0; i < st[s].n_ops; i++) {
            int len = tr_pp_op_label(&st[s].ops[i], a->v, label, sizeof label);
            if (!tr_pp_op_is_comm(st[s].ops[i].kind) && len + 1 > cw)
                cw = len + 1;
        }
    long slots = (long)(makespan + 0.5);
    if (slots * cw > TIMELINE_MAX_WIDTH) {
        printf("timeline: left out (%ld slots x %d characters is wider than %d)\n", slots, cw,
               TIMELINE_MAX_WIDTH);
        return;
    }
    char *row = malloc((size_t)(slots * cw) + 1);
    if (!row)
        return;
    printf("timeline (one slot = one forward of one chunk = %d characters; backward = 2 slots; "
           "'.' = idle):\n",
           cw);
    for (int s = 0; s < a->P; s++) {
        memset(row, '.', (size_t)(slots * cw));
        row[slots * cw] = '\0';
        for (int i = 0; i < st[s].n_ops; i++) {
            if (tr_pp_op_is_comm(st[s].ops[i].kind))
                continue;
            long b = (long)(t0[s][i] + 0.5) * cw, e = (long)(t1[s][i] + 0.5) * cw;
            if (b < 0 || e > slots * cw || b >= e)
                continue;
            memset(row + b, ' ', (size_t)(e - b));
            int len = tr_pp_op_label(&st[s].ops[i], a->v, label, sizeof label);
            memcpy(row + b, label, (size_t)(len < e - b ? len : e - b));
        }
        printf("stage %*d |%s|\n", a->P > 10 ? 2 : 1, s, row);
    }
    free(row);
}

int tr_cmd_schedule(int argc, char **argv)
{
    sched_args a = {.v = 1, .kind = TR_PP_1F1B};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0)
        return rc;

    tr_pp_schedule *st = calloc((size_t)a.P, sizeof *st);
    double **t0 = calloc((size_t)a.P, sizeof *t0), **t1 = calloc((size_t)a.P, sizeof *t1);
    int built = 0, code = 1;
    tr_pp_sim_result res;
    if (!st || !t0 || !t1)
        goto nomem;
    if (tr_pp_schedule_build_all(a.P, a.M, a.kind, a.v, st)) {
        fprintf(stderr, "trident schedule: %s\n", tr_errmsg());
        goto out;
    }
    built = 1;
    for (int s = 0; s < a.P; s++) {
        t0[s] = calloc((size_t)st[s].n_ops + 1, sizeof(double));
        t1[s] = calloc((size_t)st[s].n_ops + 1, sizeof(double));
        if (!t0[s] || !t1[s])
            goto nomem;
    }
    tr_pp_costs costs = {.tf = 1.0, .tb = 2.0, .p2p = 0.0};
    if (tr_pp_simulate(st, a.P, TR_PP_COMM_BATCHED, &costs, &res, t0, t1)) {
        fprintf(stderr, "trident schedule: %s\n", tr_errmsg());
        goto out;
    }
    if (a.json) {
        print_json(&a, st, &res);
    } else {
        printf("pipeline schedule %s: %d stages, %d micro-batches", tr_pp_kind_name(a.kind), a.P,
               a.M);
        if (a.kind == TR_PP_INTERLEAVED)
            printf(", %d chunks per stage", a.v);
        printf("\n");
        print_ops(&a, st);
        print_timeline(&a, st, t0, t1, res.makespan);
        double theory = tr_pp_bubble_theory(a.P, a.M, a.kind, a.v);
        printf("makespan: %g slots (%g forward+backward units)\n", res.makespan,
               res.makespan / 3.0);
        printf("bubble fraction: simulated %.4f, theory %.4f = (P-1)/(%sM+P-1) = %d/%ld\n",
               res.bubble_fraction, theory, a.kind == TR_PP_INTERLEAVED ? "v*" : "", a.P - 1,
               (long)(a.kind == TR_PP_INTERLEAVED ? a.v : 1) * a.M + a.P - 1);
        printf("peak stored activations per stage:");
        for (int s = 0; s < a.P; s++)
            printf(" %d", res.peak_activations[s]);
        printf("\n");
    }
    code = 0;
    goto out;
nomem:
    fprintf(stderr, "trident schedule: out of memory\n");
out:
    if (built)
        tr_pp_schedule_free_all(st, a.P);
    for (int s = 0; t0 && t1 && s < a.P; s++) {
        free(t0[s]);
        free(t1[s]);
    }
    free(t0);
    free(t1);
    free(st);
    return code;
}
