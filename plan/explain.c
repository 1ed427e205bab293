/* `trident plan --explain`: where one iteration's time and memory go, stage by stage, as a
 * table, as JSON, and as an SVG of stacked bars drawn like the sweep's chart.svg. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "plan/plan.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

static const struct {
    const char *name, *label, *short_label, *colour;
} parts[TR_PLAN_PARTS] = {
    [TR_PLAN_PART_GEMM] = {"gemm", "linear-layer GEMMs", "GEMM", "#4878cf"},
    [TR_PLAN_PART_ATTENTION] = {"attention", "attention core", "attn", "#6acc65"},
    [TR_PLAN_PART_ELEMENTWISE] = {"elementwise", "element-wise and norms", "elem", "#d5bb67"},
    [TR_PLAN_PART_RECOMPUTE] = {"recompute", "recompute", "recomp", "#82c6e2"},
    [TR_PLAN_PART_OUTPUT] = {"output_layer", "output layer and loss", "output", "#8172b2"},
    [TR_PLAN_PART_EMBEDDING] = {"embedding", "embedding", "embed", "#c4ad66"},
    [TR_PLAN_PART_ROUTING] = {"moe_routing", "MoE router, routing, host sync", "route",
                              "#64b5cd"},
    [TR_PLAN_PART_TP] = {"tp_comm", "TP communication", "TP", "#d65f5f"},
    [TR_PLAN_PART_CP] = {"cp_comm", "CP all-gather / reduce-scatter", "CP", "#a0522d"},
    [TR_PLAN_PART_EP] = {"ep_comm", "EP all-to-all", "EP", "#2e8b57"},
    [TR_PLAN_PART_PP] = {"pp_comm", "PP send/receive", "PP", "#ee854a"},
    [TR_PLAN_PART_DP] = {"dp_comm_exposed", "DP reduction (exposed)", "DP", "#b47cc7"},
    [TR_PLAN_PART_EMBED_SYNC] = {"embedding_sync", "embedding sync", "esync", "#dc7ec0"},
    [TR_PLAN_PART_ZERO_GATHER] = {"zero_gather", "ZeRO-1 all-gather", "gather", "#797979"},
    [TR_PLAN_PART_OPTIMIZER] = {"optimizer", "optimizer step", "optim", "#8c613c"},
    [TR_PLAN_PART_BUBBLE] = {"bubble", "pipeline bubble", "bubble", "#dddddd"},
    [TR_PLAN_PART_IDLE] = {"idle", "idle (waiting at sync)", "idle", "#f2f2f2"},
};

const char *tr_plan_part_name(tr_plan_part p)
{
    return p >= 0 && p < TR_PLAN_PARTS ? parts[p].name : "?";
}

const char *tr_plan_part_label(tr_plan_part p)
{
    return p >= 0 && p < TR_PLAN_PARTS ? parts[p].label : "?";
}

/* Memory parts of a stage, in the order of the table and the chart. */
enum { MEM_WEIGHTS, MEM_GRADS, MEM_OPTIMIZER, MEM_ACTIVATIONS, MEM_OTHER, MEM_RESERVED, MEM_N };
static const struct {
    const char *name, *colour;
} mem_parts[MEM_N] = {
    {"weights", "#4878cf"},     {"gradients", "#6acc65"}, {"optimizer", "#d65f5f"},
    {"activations", "#b47cc7"}, {"other", "#c4ad66"},     {"reserved", "#dddddd"},
};

static void mem_split(const tr_plan_memory *m, double out[MEM_N])
{
    out[MEM_WEIGHTS] = m->weights;
    out[MEM_GRADS] = m->grads;
    out[MEM_OPTIMIZER] = m->optimizer;
    out[MEM_ACTIVATIONS] = m->activations;
    out[MEM_OTHER] = m->recompute + m->embedding + m->loss;
    out[MEM_RESERVED] = m->reserved;
}

static const double *stage_parts(const tr_plan_explain *e, int s)
{
    return e->parts + (size_t)s * TR_PLAN_PARTS;
}

void tr_plan_print_explain(FILE *f, const tr_plan_cluster *c, const tr_plan_result *r,
                           const tr_plan_explain *e)
{
    const char *unit = c->device == TR_PLAN_DEVICE_CPU ? "rank" : "GPU";
    int P = e->P;
    fprintf(f, "\nwhere the step goes: seconds per iteration on each stage (every row adds up to "
               "the step, %.4g s)\n",
            e->step_time_s);
    /* (the MoE column only for a model with experts, the EP one with expert parallelism) */
    int show[TR_PLAN_PARTS];
    for (int k = 0; k < TR_PLAN_PARTS; k++)
        show[k] = k != TR_PLAN_PART_ROUTING && k != TR_PLAN_PART_EP;
    for (int s = 0; s < P; s++) {
        show[TR_PLAN_PART_ROUTING] |= stage_parts(e, s)[TR_PLAN_PART_ROUTING] > 0;
        show[TR_PLAN_PART_EP] |= stage_parts(e, s)[TR_PLAN_PART_EP] > 0;
    }
    fprintf(f, "stage");
    for (int k = 0; k < TR_PLAN_PARTS; k++)
        if (show[k])
            fprintf(f, " %8s", parts[k].short_label);
    fprintf(f, " %8s\n", "total");
    for (int s = 0; s < P; s++) {
        const double *p = stage_parts(e, s);
        fprintf(f, "%5d", s);
        for (int k = 0; k < TR_PLAN_PARTS; k++)
            if (show[k])
                fprintf(f, " %8.4g", p[k]);
        fprintf(f, " %8.4g\n", tr_plan_explain_stage_total(e, s));
    }
    /* the whole job, as shares: what a faster layout would have to attack */
    double sum[TR_PLAN_PARTS] = {0}, all = 0;
    for (int s = 0; s < P; s++)
        for (int k = 0; k < TR_PLAN_PARTS; k++) {
            sum[k] += stage_parts(e, s)[k];
            all += stage_parts(e, s)[k];
        }
    fprintf(f, "share of all %ss' time:", unit);
    for (int k = 0; k < TR_PLAN_PARTS; k++)
        if (sum[k] > 0.0005 * all)
            fprintf(f, " %s %.1f%%;", parts[k].label, 100 * sum[k] / all);
    fprintf(f, "\n  (TP = tensor-parallel all-reduces, PP = pipeline sends while they transfer, "
               "bubble = waiting on other stages inside the schedule, idle = waiting for the "
               "slowest stage at the gradient, norm and optimizer synchronisations)\n");
    fprintf(f, "\nwhere the memory goes: GiB per %s on each stage (capacity %.1f GiB)\n", unit,
            r->capacity / GIB);
    fprintf(f, "stage");
    for (int k = 0; k < MEM_N; k++)
        fprintf(f, " %11s", mem_parts[k].name);
    fprintf(f, " %11s\n", "total");
    for (int s = 0; s < P; s++) {
        double m[MEM_N];
        mem_split(&e->memory[s], m);
        fprintf(f, "%5d", s);
        for (int k = 0; k < MEM_N; k++)
            fprintf(f, " %11.2f", m[k] / GIB);
        fprintf(f, " %11.2f%s\n", e->memory[s].total / GIB,
                e->memory[s].total > r->capacity ? "  DOES NOT FIT" : "");
    }
    fprintf(f, "  (other = recompute workspace, embedding output and logits)\n");
}

void tr_plan_write_explain_json(FILE *f, const tr_config *cfg, const tr_plan_cluster *c,
                                const tr_plan_result *r, const tr_plan_explain *e)
{
    (void)c;
    tr_json j;
    tr_json_begin(&j, f);
    tr_json_object_begin(&j, NULL);
    tr_json_string(&j, "config", cfg->source);
    tr_json_double(&j, "step_time_s", e->step_time_s);
    tr_json_double(&j, "tflops_per_gpu", r->tflops_per_gpu);
    tr_json_double(&j, "tokens_per_s", r->tokens_per_s);
    tr_json_double(&j, "memory_capacity_bytes", r->capacity);
    tr_json_array_begin(&j, "stages");
    for (int s = 0; s < e->P; s++) {
        tr_json_object_begin(&j, NULL);
        tr_json_int(&j, "stage", s);
        tr_json_object_begin(&j, "time_s");
        for (int k = 0; k < TR_PLAN_PARTS; k++)
            if (k != TR_PLAN_PART_EP || r->layout.ep > 1) /* (EP 1: the keys as before) */
                tr_json_double(&j, parts[k].name, stage_parts(e, s)[k]);
        tr_json_object_end(&j);
        tr_json_double(&j, "total_s", tr_plan_explain_stage_total(e, s));
        const tr_plan_memory *m = &e->memory[s];
        tr_json_object_begin(&j, "memory_bytes");
        tr_json_double(&j, "weights", m->weights);
        tr_json_double(&j, "gradients", m->grads);
        tr_json_double(&j, "optimizer", m->optimizer);
        tr_json_double(&j, "activations", m->activations);
        tr_json_double(&j, "recompute", m->recompute);
        tr_json_double(&j, "embedding", m->embedding);
        tr_json_double(&j, "loss", m->loss);
        tr_json_double(&j, "reserved", m->reserved);
        tr_json_double(&j, "total", m->total);
        tr_json_object_end(&j);
        tr_json_object_end(&j);
    }
    tr_json_array_end(&j);
    tr_json_object_end(&j);
    fputc('\n', f);
}

static void xml_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

/* A round axis end: 1, 2 or 5 x 10^k at or above x. */
static double axis_end(double x)
{
    if (!(x > 0))
        return 1;
    double p = pow(10, floor(log10(x)));
    for (int m = 1; m <= 10; m++)
        if ((m == 1 || m == 2 || m == 5 || m == 10) && m * p >= x)
            return m * p;
    return 10 * p;
}

/* One panel of stacked horizontal bars: rows[P][n] values, x axis to axis_max. */
static void panel(FILE *f, int top, int left, int plot_w, int row_h, int P, int n,
                  const double *rows, const char *const *names, const char *const *colours,
                  double axis_max, const char *axis_label, const char *unit)
{
    int axis_y = top + P * row_h + 4;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left,
            top - 4, left, axis_y);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left,
            axis_y, left + plot_w, axis_y);
    for (int t = 0; t <= 5; t++) {
        int x = left + plot_w * t / 5;
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#bbb\"/>\n", x,
                top - 4, x, axis_y + 4);
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%.4g</text>\n", x,
                axis_y + 18, axis_max * t / 5);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-weight=\"bold\">", left + plot_w / 2,
            axis_y + 38);
    xml_text(f, axis_label);
    fprintf(f, "</text>\n");
    for (int s = 0; s < P; s++) {
        int y = top + s * row_h;
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">stage %d</text>\n", left - 6,
                y + row_h - 5, s);
        double x = 0;
        for (int k = 0; k < n; k++) {
            double v = rows[(size_t)s * n + k];
            if (!(v > 0))
                continue;
            double w = plot_w * v / axis_max;
            fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
                       "stroke=\"white\" stroke-width=\"0.5\"><title>stage %d ",
                    left + plot_w * x / axis_max, y + 2, w, row_h - 4, colours[k], s);
            xml_text(f, names[k]);
            fprintf(f, ": %.4g %s</title></rect>\n", v, unit);
            x += v;
        }
    }
}

static void legend(FILE *f, int x0, int y, int width, int n, const char *const *names,
                   const char *const *colours, const int *show)
{
    int x = x0;
    for (int k = 0; k < n; k++) {
        if (show && !show[k])
            continue;
        int w = 22 + 7 * (int)strlen(names[k]);
        if (x + w > x0 + width) {
            x = x0;
            y += 18;
        }
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\" "
                   "stroke=\"#888\" stroke-width=\"0.5\"/>\n",
                x, y - 10, colours[k]);
        fprintf(f, "<text x=\"%d\" y=\"%d\">", x + 16, y);
        xml_text(f, names[k]);
        fprintf(f, "</text>\n");
        x += w;
    }
}

static int legend_rows(int width, int n, const char *const *names, const int *show)
{
    int x = 0, rows = 1;
    for (int k = 0; k < n; k++) {
        if (show && !show[k])
            continue;
        int w = 22 + 7 * (int)strlen(names[k]);
        if (x + w > width) {
            x = 0;
            rows++;
        }
        x += w;
    }
    return rows;
}

int tr_plan_write_explain_svg(FILE *f, const tr_plan_cluster *c, const tr_plan_result *r,
                              const tr_plan_explain *e, const char *title)
{
    int P = e->P;
    const int plot_w = 560, row_h = P > 32 ? 10 : 18, left = 90, width = left + plot_w + 40;
    const char *tnames[TR_PLAN_PARTS], *tcol[TR_PLAN_PARTS], *mnames[MEM_N], *mcol[MEM_N];
    int tshow[TR_PLAN_PARTS] = {0};
    for (int k = 0; k < TR_PLAN_PARTS; k++) {
        tnames[k] = parts[k].label;
        tcol[k] = parts[k].colour;
        for (int s = 0; s < P; s++)
            if (stage_parts(e, s)[k] > 0)
                tshow[k] = 1;
    }
    for (int k = 0; k < MEM_N; k++) {
        mnames[k] = mem_parts[k].name;
        mcol[k] = mem_parts[k].colour;
    }
    double *mrows = calloc((size_t)P * MEM_N, sizeof *mrows);
    if (!mrows)
        return tr_fail(TR_ERR_NOMEM, "plan --explain: out of memory for the chart");
    double mem_max = r->capacity;
    for (int s = 0; s < P; s++) {
        mem_split(&e->memory[s], mrows + (size_t)s * MEM_N);
        if (e->memory[s].total > mem_max)
            mem_max = e->memory[s].total;
    }
    for (size_t i = 0; i < (size_t)P * MEM_N; i++)
        mrows[i] /= GIB;
    int lt = legend_rows(plot_w + left - 20, TR_PLAN_PARTS, tnames, tshow);
    int lm = legend_rows(plot_w + left - 20, MEM_N, mnames, NULL);
    int top1 = 70, panel_h = P * row_h + 50;
    int ltop = top1 + panel_h + 10, top2 = ltop + 18 * lt + 40;
    int height = top2 + panel_h + 18 * lm + 30;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n",
            width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"20\" y=\"24\" font-size=\"16\" font-weight=\"bold\">trident plan "
               "--explain: ");
    xml_text(f, title);
    fprintf(f, "</text>\n");
    char lab[96];
    tr_plan_layout_label(&r->layout, lab, sizeof lab);
    fprintf(f, "<text x=\"20\" y=\"44\">");
    xml_text(f, lab);
    fprintf(f, " on %d x %s: step %.4g s, %.4g TFLOP/s per %s, %.4g GiB per %s</text>\n",
            r->world, c->preset, e->step_time_s, r->tflops_per_gpu,
            c->device == TR_PLAN_DEVICE_CPU ? "rank" : "GPU", r->memory.total / GIB,
            c->device == TR_PLAN_DEVICE_CPU ? "rank" : "GPU");
    fprintf(f, "<text x=\"20\" y=\"%d\" font-weight=\"bold\">time of one iteration by part "
               "(each stage's bar is the whole step)</text>\n",
            top1 - 12);
    panel(f, top1, left, plot_w, row_h, P, TR_PLAN_PARTS, e->parts, tnames, tcol,
          axis_end(e->step_time_s), "seconds per iteration", "s");
    legend(f, 20, ltop + 12, plot_w + left - 20, TR_PLAN_PARTS, tnames, tcol, tshow);
    fprintf(f, "<text x=\"20\" y=\"%d\" font-weight=\"bold\">memory per %s by part (capacity "
               "%.1f GiB: red line)</text>\n",
            top2 - 12, c->device == TR_PLAN_DEVICE_CPU ? "rank" : "GPU", r->capacity / GIB);
    double mx = axis_end(mem_max / GIB);
    panel(f, top2, left, plot_w, row_h, P, MEM_N, mrows, mnames, mcol, mx, "GiB", "GiB");
    int cx = left + (int)(plot_w * (r->capacity / GIB) / mx);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#c00\" "
               "stroke-width=\"1.5\"/>\n",
            cx, top2 - 6, cx, top2 + P * row_h + 4);
    legend(f, 20, top2 + P * row_h + 66, plot_w + left - 20, MEM_N, mnames, mcol, NULL);
    fprintf(f, "</svg>\n");
    free(mrows);
    return ferror(f) ? tr_fail(TR_ERR_IO, "writing the --explain chart failed") : TR_OK;
}
