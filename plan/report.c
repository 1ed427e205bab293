/* What `trident plan` prints: a text report for people and JSON for programs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "plan/plan.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

int tr_plan_layout_label(const tr_plan_layout *l, char *buf, size_t n)
{
    if (l->pp == 0)
        return snprintf(buf, n, "TP%d (any PP)", l->tp);
    if (l->micro_batch == 0)
        return snprintf(buf, n, "TP%d PP%d DP%d (any micro-batch)", l->tp, l->pp, l->dp);
    int cp = l->cp > 1 ? l->cp : 1;
    int z = l->dp * cp > 1 ? (l->zero_stage > 1 ? l->zero_stage : l->distributed_optimizer) : 0;
    char cps[16] = "", eps[16] = "";
    if (cp > 1)
        snprintf(cps, sizeof cps, "CP%d ", cp);
    if (l->ep > 1)
        snprintf(eps, sizeof eps, "EP%d ", l->ep);
    return snprintf(buf, n, "TP%d %sPP%d DP%d %smb%d %s%s%.0d", l->tp, cps, l->pp, l->dp, eps,
                    l->micro_batch, tr_plan_recompute_name(l->recompute), z ? " zero" : "", z);
}

static const char *unit_of(const tr_plan_cluster *c)
{
    return c->device == TR_PLAN_DEVICE_CPU ? "rank" : "GPU";
}

/* "1.2 ms", "3.40 s", "2.1 min" */
static const char *dur(double s, char *buf, size_t n)
{
    if (s < 1e-3)
        snprintf(buf, n, "%.1f us", s * 1e6);
    else if (s < 1)
        snprintf(buf, n, "%.2f ms", s * 1e3);
    else if (s < 600)
        snprintf(buf, n, "%.2f s", s);
    else if (s < 3 * 3600)
        snprintf(buf, n, "%.1f min", s / 60);
    else
        snprintf(buf, n, "%.1f h", s / 3600);
    return buf;
}

static const char *count(double x, char *buf, size_t n)
{
    if (x >= 1e12)
        snprintf(buf, n, "%.3gT", x / 1e12);
    else if (x >= 1e9)
        snprintf(buf, n, "%.4gB", x / 1e9);
    else if (x >= 1e6)
        snprintf(buf, n, "%.4gM", x / 1e6);
    else
        snprintf(buf, n, "%.0f", x);
    return buf;
}

static void describe_cluster(FILE *f, const tr_plan_cluster *c, int world)
{
    char shape[160] = "";
    if (c->device == TR_PLAN_DEVICE_GPU && c->sms > 0)
        snprintf(shape, sizeof shape, " (GEMMs by shape over %d SMs%s; HBM %.4g GB/s)", c->sms,
                 c->n_gemm_table > 0 ? " and a measured table" : "", c->hbm_bw / 1e9);
    fprintf(f, "cluster: %s%s, %d node%s x %d %s%s = %d rank%s planned (%s); %.4g TFLOP/s peak "
               "per %s x efficiency %.3g%s; intra-node %.4g GB/s, inter-node %.4g GB/s per node\n",
            c->preset, c->overridden ? " (modified)" : "", c->nodes, c->nodes == 1 ? "" : "s",
            c->gpus_per_node, c->device == TR_PLAN_DEVICE_CPU ? "rank" : "GPU",
            c->gpus_per_node == 1 ? "" : "s", world, world == 1 ? "" : "s",
            c->device == TR_PLAN_DEVICE_CPU ? "ranks share each node's cores and memory"
                                            : "one rank per GPU",
            c->peak_flops / 1e12, c->device == TR_PLAN_DEVICE_CPU ? "node" : "GPU",
            c->gemm_efficiency, shape, c->intra_bw / 1e9, c->inter_bw / 1e9);
}

void tr_plan_print(FILE *f, const tr_config *cfg, const tr_plan_cluster *c, const tr_plan_result *r)
{
    const tr_model_config *m = &cfg->model;
    const tr_plan_layout *L = &r->layout;
    const tr_plan_memory *mm = &r->memory;
    char a[32], b[32], d[32], e[32];
    describe_cluster(f, c, r->world);
    fprintf(f, "model: %d layers, hidden %d, %d heads, seq %d, vocab %d (padded %d): %s "
               "parameters",
            m->num_layers, m->hidden_size, m->num_attention_heads, m->seq_length, m->vocab_size,
            r->vocab_padded, count(r->n_params, a, sizeof a));
    if (m->num_experts > 0)
        fprintf(f, ", %s active (%d of %d experts a token; balanced load assumed)",
                count(r->n_active_params, b, sizeof b), m->moe_router_topk, m->num_experts);
    fprintf(f, "\n");
    char cps[24] = "";
    if (L->cp > 1)
        snprintf(cps, sizeof cps, "CP %d x ", L->cp);
    fprintf(f, "layout: TP %d x %sPP %d x DP %d; micro-batch %d, global batch %d -> %d "
               "micro-batches per step; %s%s; recompute %s; %s%s%s\n",
            L->tp, cps, L->pp, L->dp, L->micro_batch, L->global_batch, L->num_micro_batches,
            tr_pp_kind_name(L->schedule), L->v > 1 ? " (interleaved chunks)" : "",
            tr_plan_recompute_name(L->recompute), L->bf16 ? "bf16" : "fp32",
            !(L->distributed_optimizer && L->dp > 1) ? ""
            : L->zero_stage == 3                     ? ", ZeRO-3 (optimizer, gradients, weights sharded)"
            : L->zero_stage == 2                     ? ", ZeRO-2 (optimizer and gradients sharded)"
                                                     : ", distributed optimizer (ZeRO-1)",
            L->sequence_parallel && L->tp > 1 ? ", sequence parallel" : "");
    const tr_training_config *t = &cfg->training;
    if (t->n_rampup_batch_size == 3)
        fprintf(f, "batch ramp-up: from %d by %d over %d samples; planned at the final global "
                   "batch %d\n", t->rampup_batch_size[0], t->rampup_batch_size[1],
                t->rampup_batch_size[2], t->global_batch_size);
    if (L->cp > 1) {
        char cpt[32];
        fprintf(f, "context parallel: CP %d (s / CP = %d tokens a rank), %s, %s of K/V "
                   "gathers and scatters a micro-batch; gradients summed over DP x CP = %d\n",
                L->cp, cfg->model.seq_length / L->cp, tr_plan_link_name(r->cp_link),
                dur(r->cp_comm_s, cpt, sizeof cpt), L->dp * L->cp);
    }
    if (L->ep > 1) {
        char ept[32], grads[96];
        if (L->trident_kernels)
            snprintf(grads, sizeof grads, "every rank keeps every expert's parameters and "
                                          "state (trident's engine)");
        else
            snprintf(grads, sizeof grads, "expert gradients summed over EDP = DP / EP = %d, %s",
                     L->dp / L->ep, tr_plan_link_name(r->edp_link));
        fprintf(f, "expert parallel: EP %d (%d of %d experts run on a rank), %s all-to-alls of "
                   "the routed rows, %s a micro-batch (4 a layer, 6 with full recompute, and the "
                   "counts; balanced routing assumed); %s\n",
                L->ep, m->num_experts / L->ep, m->num_experts, tr_plan_link_name(r->ep_link),
                dur(r->ep_comm_s, ept, sizeof ept), grads);
    }
    fprintf(f, "links: TP %s, PP %s, DP %s; runtime %s (P2P %s%s, gradient accumulation %s)%s\n",
            tr_plan_link_name(r->tp_link), tr_plan_link_name(r->pp_link),
            tr_plan_link_name(r->dp_link),
            cfg->cluster.runtime ? cfg->cluster.runtime : "trident",
            L->p2p_batched ? "batched" : "one send/recv at a time",
            L->scatter_gather ? ", scatter/gather" : "", L->grad_accum_fused ? "fused" : "unfused",
            L->dropout ? "; dropout" : "");
    fprintf(f, "\nmemory per %s: %.1f GiB of %.1f GiB (stage %d of %d decides) -> %s\n",
            unit_of(c), mm->total / GIB, r->capacity / GIB, r->memory_stage, L->pp,
            r->fits ? "fits" : "DOES NOT FIT");
    fprintf(f, "  weights              %8.2f GiB\n", mm->weights / GIB);
    fprintf(f, "  gradients            %8.2f GiB\n", mm->grads / GIB);
    fprintf(f, "  optimizer state      %8.2f GiB\n", mm->optimizer / GIB);
    fprintf(f, "  activations          %8.2f GiB  (in flight: %d micro-batch%s x %d layers)\n",
            mm->activations / GIB, r->in_flight, r->in_flight == 1 ? "" : "es", r->stage_layers);
    fprintf(f, "  recompute workspace  %8.2f GiB\n", mm->recompute / GIB);
    fprintf(f, "  embedding / loss     %8.2f GiB\n", (mm->embedding + mm->loss) / GIB);
    fprintf(f, "  reserved             %8.2f GiB\n", mm->reserved / GIB);
    if (!r->valid)
        fprintf(f, "  problem: %s\n", r->problem);

    fprintf(f, "\nstep time: %s per iteration\n", dur(r->step_time_s, a, sizeof a));
    fprintf(f, "  pipeline (event-simulated %s, %d micro-batches): %s; idle %.1f%% (bubble and "
               "stage imbalance; closed-formula bubble %.1f%%)\n",
            tr_pp_kind_name(L->schedule), L->num_micro_batches, dur(r->pipeline_s, a, sizeof a),
            100 * r->bubble_fraction, 100 * r->bubble_fraction_theory);
    fprintf(f, "  slowest stage %d, per micro-batch: forward %s, backward %s (compute %s, TP "
               "communication %s)\n",
            r->slow_stage, dur(r->tf_s, a, sizeof a), dur(r->tb_s, b, sizeof b),
            dur(r->compute_f_s + r->compute_b_s, d, sizeof d), dur(r->tp_comm_s, e, sizeof e));
    fprintf(f, "  P2P send %s; DP gradient reduction %s (exposed %s)", dur(r->p2p_s, a, sizeof a),
            dur(r->dp_comm_s, b, sizeof b), dur(r->dp_exposed_s, d, sizeof d));
    fprintf(f, "; embedding sync %s", dur(r->embed_sync_s, a, sizeof a));
    if (r->param_gather_s > 0)
        fprintf(f, "; ZeRO-1 parameter all-gather %s", dur(r->param_gather_s, a, sizeof a));
    if (r->optimizer_s > 0)
        fprintf(f, "; optimizer step %s", dur(r->optimizer_s, a, sizeof a));
    fprintf(f, "\n\nthroughput: %.0f tokens/s; %.4g TFLOP/s per %s (hardware, recompute "
               "counted), %.4g model TFLOP/s, MFU %.1f%%\n",
            r->tokens_per_s, r->tflops_per_gpu, unit_of(c), r->model_tflops_per_gpu,
            100 * r->mfu);
    if (m->num_experts > 0)
        fprintf(f, "  (model FLOPs and MFU of the active parameters: %d of %d experts' MLPs a "
                   "token, as Megatron counts them, and the router's GEMM)\n",
                m->moe_router_topk, m->num_experts);
    double days = r->time_to_train_s / 86400;
    if (days >= 1)
        fprintf(f, "time to train %s tokens: %.1f days (%.2f months)\n",
                count(r->train_tokens, a, sizeof a), days, days / 30.44);
    else
        fprintf(f, "time to train %s tokens: %s\n", count(r->train_tokens, a, sizeof a),
                dur(r->time_to_train_s, b, sizeof b));
}

static void json_cluster(tr_json *j, const tr_plan_cluster *c)
{
    tr_json_object_begin(j, "cluster");
    tr_json_string(j, "preset", c->preset);
    tr_json_bool(j, "modified", c->overridden);
    tr_json_string(j, "device", c->device == TR_PLAN_DEVICE_CPU ? "cpu" : "gpu");
    tr_json_int(j, "nodes", c->nodes);
    tr_json_int(j, "gpus_per_node", c->gpus_per_node);
    tr_json_double(j, "memory_bytes", c->memory_bytes);
    tr_json_double(j, "reserved_bytes", c->reserved_bytes);
    tr_json_double(j, "peak_flops", c->peak_flops);
    tr_json_double(j, "gemm_efficiency", c->gemm_efficiency);
    tr_json_double(j, "intra_node_bytes_per_s", c->intra_bw);
    tr_json_double(j, "intra_node_latency_s", c->intra_latency);
    tr_json_double(j, "inter_node_bytes_per_s", c->inter_bw);
    tr_json_double(j, "inter_node_latency_s", c->inter_latency);
    tr_json_int(j, "sms", c->sms);
    tr_json_double(j, "hbm_bytes_per_s", c->hbm_bw);
    tr_json_int(j, "measured_gemm_rows", c->n_gemm_table);
    tr_json_object_end(j);
}

static void json_layout(tr_json *j, const char *key, const tr_plan_layout *L)
{
    tr_json_object_begin(j, key);
    tr_json_int(j, "tp", L->tp);
    if (L->cp > 1) /* (key only with context parallelism: 3-D layouts' JSON unchanged) */
        tr_json_int(j, "cp", L->cp);
    if (L->ep > 1) /* (likewise expert parallelism) */
        tr_json_int(j, "ep", L->ep);
    tr_json_int(j, "pp", L->pp);
    tr_json_int(j, "dp", L->dp);
    if (L->micro_batch > 0) {
        tr_json_int(j, "micro_batch", L->micro_batch);
        tr_json_int(j, "global_batch", L->global_batch);
        tr_json_int(j, "num_micro_batches", L->num_micro_batches);
        tr_json_string(j, "schedule", tr_pp_kind_name(L->schedule));
        tr_json_int(j, "virtual_stages", L->v);
        tr_json_string(j, "recompute", tr_plan_recompute_name(L->recompute));
        tr_json_bool(j, "distributed_optimizer", L->distributed_optimizer && L->dp > 1);
        tr_json_int(j, "zero_stage", L->dp > 1 ? (L->zero_stage > 1 ? L->zero_stage : L->distributed_optimizer) : 0);
        tr_json_bool(j, "sequence_parallel", L->sequence_parallel && L->tp > 1);
        tr_json_string(j, "precision", L->bf16 ? "bf16" : "fp32");
        tr_json_bool(j, "p2p_batched", L->p2p_batched);
        tr_json_bool(j, "scatter_gather", L->scatter_gather);
        tr_json_bool(j, "grad_accum_fused", L->grad_accum_fused);
        tr_json_bool(j, "dropout", L->dropout);
    }
    tr_json_object_end(j);
}

/* The fields of one prediction, inside an open object. */
static void json_result_fields(tr_json *j, const tr_plan_result *r)
{
    const tr_plan_memory *mm = &r->memory;
    json_layout(j, "layout", &r->layout);
    tr_json_int(j, "world_size", r->world);
    tr_json_int(j, "parameters", llround(r->n_params)); /* exact: %.9g rounded 1,414,647,808 */
    tr_json_int(j, "active_parameters", llround(r->n_active_params));
    tr_json_int(j, "vocab_padded", r->vocab_padded);
    tr_json_double(j, "step_time_s", r->step_time_s);
    tr_json_double(j, "tokens_per_s", r->tokens_per_s);
    tr_json_double(j, "tflops_per_gpu", r->tflops_per_gpu);
    tr_json_double(j, "model_tflops_per_gpu", r->model_tflops_per_gpu);
    tr_json_double(j, "mfu", r->mfu);
    tr_json_double(j, "memory_per_gpu_bytes", mm->total);
    tr_json_double(j, "memory_capacity_bytes", r->capacity);
    tr_json_bool(j, "fits", r->fits);
    tr_json_bool(j, "valid", r->valid);
    if (r->problem[0])
        tr_json_string(j, "problem", r->problem);
    else
        tr_json_null(j, "problem");
    tr_json_object_begin(j, "memory_breakdown");
    tr_json_int(j, "stage", r->memory_stage);
    tr_json_int(j, "micro_batches_in_flight", r->in_flight);
    tr_json_int(j, "layers", r->stage_layers);
    tr_json_double(j, "weights_bytes", mm->weights);
    tr_json_double(j, "gradients_bytes", mm->grads);
    tr_json_double(j, "optimizer_bytes", mm->optimizer);
    tr_json_double(j, "activations_bytes", mm->activations);
    tr_json_double(j, "recompute_bytes", mm->recompute);
    tr_json_double(j, "embedding_bytes", mm->embedding);
    tr_json_double(j, "loss_bytes", mm->loss);
    tr_json_double(j, "reserved_bytes", mm->reserved);
    tr_json_object_end(j);
    tr_json_array_begin(j, "memory_per_stage_bytes");
    for (int s = 0; s < r->layout.pp; s++)
        tr_json_double(j, NULL, r->stage_memory[s]);
    tr_json_array_end(j);
    tr_json_object_begin(j, "time_breakdown");
    tr_json_double(j, "pipeline_s", r->pipeline_s);
    tr_json_double(j, "bubble_fraction", r->bubble_fraction);
    tr_json_double(j, "bubble_fraction_theory", r->bubble_fraction_theory);
    tr_json_int(j, "slowest_stage", r->slow_stage);
    tr_json_double(j, "forward_per_micro_batch_s", r->tf_s);
    tr_json_double(j, "backward_per_micro_batch_s", r->tb_s);
    tr_json_double(j, "compute_per_micro_batch_s", r->compute_f_s + r->compute_b_s);
    tr_json_double(j, "tp_comm_per_micro_batch_s", r->tp_comm_s);
    tr_json_double(j, "p2p_send_s", r->p2p_s);
    tr_json_double(j, "dp_reduce_s", r->dp_comm_s);
    tr_json_double(j, "dp_exposed_s", r->dp_exposed_s);
    tr_json_double(j, "embedding_sync_s", r->embed_sync_s);
    tr_json_double(j, "param_allgather_s", r->param_gather_s);
    tr_json_double(j, "optimizer_s", r->optimizer_s);
    tr_json_string(j, "tp_link", tr_plan_link_name(r->tp_link));
    tr_json_string(j, "pp_link", tr_plan_link_name(r->pp_link));
    tr_json_string(j, "dp_link", tr_plan_link_name(r->dp_link));
    if (r->layout.cp > 1) {
        tr_json_double(j, "cp_comm_per_micro_batch_s", r->cp_comm_s);
        tr_json_string(j, "cp_link", tr_plan_link_name(r->cp_link));
    }
    if (r->layout.ep > 1) {
        tr_json_double(j, "ep_comm_per_micro_batch_s", r->ep_comm_s);
        tr_json_string(j, "ep_link", tr_plan_link_name(r->ep_link));
        tr_json_string(j, "edp_link", tr_plan_link_name(r->edp_link));
    }
    tr_json_object_end(j);
    tr_json_double(j, "tokens_per_step", r->tokens_per_step);
    tr_json_double(j, "hardware_flops_per_step", r->hardware_flops);
    tr_json_double(j, "model_flops_per_step", r->model_flops);
    tr_json_double(j, "train_tokens", r->train_tokens);
    tr_json_double(j, "time_to_train_s", r->time_to_train_s);
    tr_json_double(j, "time_to_train_days", r->time_to_train_s / 86400);
}

void tr_plan_write_json(FILE *f, const tr_config *cfg, const tr_plan_cluster *c,
                        const tr_plan_result *r)
{
    tr_json j;
    tr_json_begin(&j, f);
    tr_json_object_begin(&j, NULL);
    tr_json_string(&j, "config", cfg->source);
    json_cluster(&j, c);
    json_result_fields(&j, r);
    tr_json_object_end(&j);
    fputc('\n', f);
}

/* The time of a step split into parts that add up to it (for comparing two layouts). */
typedef struct {
    double compute, tp, ep, bubble, dp, other;
} time_parts;

static time_parts parts_of(const tr_plan_result *r)
{
    int M = r->layout.num_micro_batches;
    time_parts p;
    p.compute = M * (r->compute_f_s + r->compute_b_s);
    p.tp = M * r->tp_comm_s;
    p.ep = M * r->ep_comm_s;
    p.bubble = r->pipeline_s - p.compute - p.tp - p.ep;
    p.dp = r->dp_exposed_s;
    p.other = r->embed_sync_s + r->param_gather_s + r->optimizer_s;
    return p;
}

static void print_row(FILE *f, int rank, const tr_plan_result *r, int width)
{
    char lab[96];
    tr_plan_layout_label(&r->layout, lab, sizeof lab);
    fprintf(f, "%4d  %-*s %10.0f %9.1f %7.1f %6.1f%% %8.1f %7.1f%%\n", rank, width, lab,
            r->tokens_per_s, r->tflops_per_gpu, r->model_tflops_per_gpu, 100 * r->mfu,
            r->memory.total / GIB, 100 * r->bubble_fraction);
}

static void why_faster(FILE *f, const tr_plan_result *best, const tr_plan_result *own)
{
    time_parts x = parts_of(best), y = parts_of(own);
    char lb[96], lo[96];
    tr_plan_layout_label(&best->layout, lb, sizeof lb);
    tr_plan_layout_label(&own->layout, lo, sizeof lo);
    fprintf(f, "why #1 (%s) beats the config's layout (%s): step %.2f s vs %.2f s (%.2fx)\n", lb,
            lo, best->step_time_s, own->step_time_s, own->step_time_s / best->step_time_s);
    fprintf(f, "  %-34s %10s %10s\n", "part of the step (slowest stage)", "#1", "config");
    fprintf(f, "  %-34s %9.2fs %9.2fs\n", "compute (recompute included)", x.compute, y.compute);
    fprintf(f, "  %-34s %9.2fs %9.2fs\n", "tensor-parallel communication", x.tp, y.tp);
    if (x.ep > 0 || y.ep > 0)
        fprintf(f, "  %-34s %9.2fs %9.2fs\n", "expert all-to-all", x.ep, y.ep);
    fprintf(f, "  %-34s %9.2fs %9.2fs\n", "pipeline bubble + P2P", x.bubble, y.bubble);
    fprintf(f, "  %-34s %9.2fs %9.2fs\n", "exposed DP reduction", x.dp, y.dp);
    fprintf(f, "  %-34s %9.2fs %9.2fs\n", "embedding sync, optimizer, ZeRO-1", x.other, y.other);
    if (best->layout.recompute != own->layout.recompute)
        fprintf(f, "  recompute %s costs %.0f%% more FLOPs than the model's; %s costs %.0f%% "
                   "(and fits in memory here)\n",
                tr_plan_recompute_name(own->layout.recompute),
                100 * (own->hardware_flops / own->model_flops - 1),
                tr_plan_recompute_name(best->layout.recompute),
                100 * (best->hardware_flops / best->model_flops - 1));
}

void tr_plan_print_search(FILE *f, const tr_config *cfg, const tr_plan_cluster *c,
                          const tr_plan_search_result *s, int top)
{
    (void)cfg;
    describe_cluster(f, c, s->world);
    fprintf(f, "searched %d layouts in %.2f s: %d fit in memory, %d rejected\n\n",
            s->n_candidates, s->seconds, s->n_fit, s->n_rejected);
    int n = top < s->n_fit ? top : s->n_fit, width = 34;
    char lab[96];
    for (int i = 0; i < s->n_fit; i++) /* (wider only for EP's labels: the rest as before) */
        if ((i < n || i + 1 == s->config_rank) && s->fit[i].layout.ep > 1) {
            int len = tr_plan_layout_label(&s->fit[i].layout, lab, sizeof lab);
            width = len > width ? len : width;
        }
    fprintf(f, "rank  %-*s %10s %9s %7s %7s %8s %8s\n", width, "layout", "tokens/s", "TFLOP/s",
            "model", "MFU", "mem GiB", "idle");
    for (int i = 0; i < n; i++)
        print_row(f, i + 1, &s->fit[i], width);
    if (s->config_rank > n)
        print_row(f, s->config_rank, &s->fit[s->config_rank - 1], width);
    fputc('\n', f);
    const tr_plan_result *own = &s->config_result;
    if (own->world > 0) {
        tr_plan_layout_label(&own->layout, lab, sizeof lab);
        if (s->config_rank == 1)
            fprintf(f, "the config's layout (%s) ranks #1\n", lab);
        else if (s->config_rank > 1) {
            fprintf(f, "the config's layout (%s) ranks #%d of %d\n", lab, s->config_rank, s->n_fit);
            why_faster(f, &s->fit[0], own);
        } else
            fprintf(f, "the config's layout (%s) is not among them: %s\n", lab,
                    own->problem[0] ? own->problem : "not a layout of this world size");
    }
    /* Rejections: a count per kind of reason, then the nearest miss of every (TP, PP). */
    int n_mem = 0, n_struct = 0;
    for (int i = 0; i < s->n_rejected; i++)
        if (s->rejected[i].layout.micro_batch > 0 && !strncmp(s->rejected[i].reason, "needs", 5))
            n_mem++;
        else
            n_struct++;
    fprintf(f, "\nrejected: %d do not fit in memory, %d are not valid layouts of %d ranks; per "
               "(TP, PP) with no layout that fits, the reason:\n",
            n_mem, n_struct, s->world);
    for (int i = 0; i < s->n_rejected; i++) {
        const tr_plan_rejected *r = &s->rejected[i];
        int any_fit = 0;
        for (int k = 0; k < s->n_fit && !any_fit; k++)
            any_fit = s->fit[k].layout.tp == r->layout.tp && s->fit[k].layout.pp == r->layout.pp;
        if (any_fit)
            continue;
        /* one line per (TP, PP): the first rejection seen (the smallest micro-batch with the
         * lightest recompute comes first; for memory print the last = most memory saving) */
        int last = i;
        while (last + 1 < s->n_rejected && s->rejected[last + 1].layout.tp == r->layout.tp &&
               s->rejected[last + 1].layout.pp == r->layout.pp)
            last++;
        const tr_plan_rejected *shown = r;
        if (r->layout.micro_batch > 0) {
            /* the variant with the least memory: micro-batch 1, full recompute, ZeRO-1 */
            for (int k = i; k <= last; k++)
                if (s->rejected[k].layout.micro_batch == r->layout.micro_batch &&
                    s->rejected[k].layout.recompute == TR_PLAN_RECOMPUTE_FULL)
                    shown = &s->rejected[k];
        }
        tr_plan_layout_label(&shown->layout, lab, sizeof lab);
        fprintf(f, "  %-34s %s\n", lab, shown->reason);
        i = last;
    }
}

void tr_plan_write_search_json(FILE *f, const tr_config *cfg, const tr_plan_cluster *c,
                               const tr_plan_search_result *s, int top)
{
    tr_json j;
    tr_json_begin(&j, f);
    tr_json_object_begin(&j, NULL);
    tr_json_string(&j, "config", cfg->source);
    json_cluster(&j, c);
    tr_json_int(&j, "world_size", s->world);
    tr_json_int(&j, "candidates", s->n_candidates);
    tr_json_int(&j, "fit", s->n_fit);
    tr_json_double(&j, "search_seconds", s->seconds);
    tr_json_int(&j, "config_rank", s->config_rank);
    tr_json_array_begin(&j, "top");
    int n = top < s->n_fit ? top : s->n_fit;
    for (int i = 0; i < n; i++) {
        tr_json_object_begin(&j, NULL);
        tr_json_int(&j, "rank", i + 1);
        json_result_fields(&j, &s->fit[i]);
        tr_json_object_end(&j);
    }
    tr_json_array_end(&j);
    if (s->config_result.world > 0) {
        tr_json_object_begin(&j, "config_layout");
        json_result_fields(&j, &s->config_result);
        tr_json_object_end(&j);
    }
    tr_json_array_begin(&j, "rejected");
    for (int i = 0; i < s->n_rejected; i++) {
        tr_json_object_begin(&j, NULL);
        json_layout(&j, "layout", &s->rejected[i].layout);
        tr_json_string(&j, "reason", s->rejected[i].reason);
        tr_json_object_end(&j);
    }
    tr_json_array_end(&j);
    tr_json_object_end(&j);
    fputc('\n', f);
}
