/* What a sweep writes: results.csv, results.jsonl and an SVG chart of tokens/s per point. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "launch/sweep.h"

static const char *status_name(tr_point_status s)
{
    return s == TR_POINT_OK ? "ok" : s == TR_POINT_SKIPPED ? "skipped" : s == TR_POINT_FAILED ? "failed" : "pending";
}

/* The value of axis a of point i, without its "key=" prefix. */
static const char *axis_value(const tr_grid_spec *g, size_t i, int a)
{
    const char *vals[64];
    tr_grid_point(g, i, vals);
    const char *eq = strchr(vals[a], '=');
    return eq ? eq + 1 : vals[a];
}

static void csv_field(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s == '\n' ? ' ' : *s, f);
    }
    fputc('"', f);
}

static void csv_number(FILE *f, double v, int ok)
{
    if (ok && isfinite(v))
        fprintf(f, ",%.6g", v);
    else
        fputc(',', f);
}

int tr_sweep_write_csv(FILE *f, const tr_grid_spec *g, const tr_sweep_point *p, size_t n)
{
    fprintf(f, "point");
    for (int a = 0; a < g->n_axes; a++)
        fprintf(f, ",%s", g->axes[a].key);
    fprintf(f, ",dp,tp,pp,status,reason,median_ms_per_iter,tokens_per_s,peak_rss_mb_max_rank,"
               "peak_rss_mb_per_rank,measured_bubble,final_loss,predicted_ms_per_iter,measured_over_predicted\n");
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%zu", i);
        for (int a = 0; a < g->n_axes; a++) {
            fputc(',', f);
            csv_field(f, axis_value(g, i, a));
        }
        int ok = p[i].status == TR_POINT_OK;
        fprintf(f, ",%d,%d,%d,%s,", p[i].dp, p[i].tp, p[i].pp, status_name(p[i].status));
        csv_field(f, p[i].reason);
        csv_number(f, p[i].median_ms, ok);
        csv_number(f, p[i].tokens_per_s, ok);
        csv_number(f, p[i].peak_rss_mb, ok);
        fputc(',', f); /* every rank's peak, "r0;r1;..." */
        for (int r = 0; ok && p[i].peak_rss_mb_per_rank && r < p[i].n_ranks; r++)
            fprintf(f, "%s%.6g", r ? ";" : "", p[i].peak_rss_mb_per_rank[r]);
        csv_number(f, p[i].bubble, ok);
        csv_number(f, p[i].final_loss, ok);
        csv_number(f, p[i].predicted_ms, p[i].predicted_ms > 0);
        csv_number(f, p[i].median_ms / p[i].predicted_ms, ok && p[i].predicted_ms > 0);
        fputc('\n', f);
    }
    return ferror(f) ? tr_fail(TR_ERR_IO, "writing results.csv failed") : TR_OK;
}

int tr_sweep_write_jsonl(FILE *f, const tr_grid_spec *g, const tr_sweep_point *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        tr_json j;
        tr_json_begin(&j, f);
        tr_json_object_begin(&j, NULL);
        tr_json_int(&j, "point", (long long)i);
        tr_json_object_begin(&j, "values");
        for (int a = 0; a < g->n_axes; a++)
            tr_json_string(&j, g->axes[a].key, axis_value(g, i, a));
        tr_json_object_end(&j);
        tr_json_int(&j, "dp", p[i].dp);
        tr_json_int(&j, "tp", p[i].tp);
        tr_json_int(&j, "pp", p[i].pp);
        tr_json_string(&j, "status", status_name(p[i].status));
        if (p[i].reason[0])
            tr_json_string(&j, "reason", p[i].reason);
        if (p[i].status == TR_POINT_OK) {
            tr_json_double(&j, "median_ms_per_iter", p[i].median_ms);
            tr_json_double(&j, "tokens_per_s", p[i].tokens_per_s);
            tr_json_double(&j, "peak_rss_mb_max_rank", p[i].peak_rss_mb);
            tr_json_array_begin(&j, "peak_rss_mb_per_rank");
            for (int r = 0; p[i].peak_rss_mb_per_rank && r < p[i].n_ranks; r++)
                tr_json_double(&j, NULL, p[i].peak_rss_mb_per_rank[r]);
            tr_json_array_end(&j);
            tr_json_double(&j, "measured_bubble", p[i].bubble);
            tr_json_double(&j, "final_loss", p[i].final_loss);
        }
        if (p[i].predicted_ms > 0) {
            tr_json_double(&j, "predicted_ms_per_iter", p[i].predicted_ms);
            if (p[i].status == TR_POINT_OK)
                tr_json_double(&j, "measured_over_predicted", p[i].median_ms / p[i].predicted_ms);
        }
        tr_json_object_end(&j);
        fputc('\n', f);
    }
    return ferror(f) ? tr_fail(TR_ERR_IO, "writing results.jsonl failed") : TR_OK;
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A short name for an axis in chart labels: Megatron's long keys get their usual
 * abbreviations, others their last component. */
static const char *short_key(const char *key)
{
    static const struct {
        const char *key, *name;
    } names[] = {{"parallel.tensor_model_parallel_size", "tp"},
                 {"parallel.pipeline_model_parallel_size", "pp"},
                 {"training.micro_batch_size", "mb"},
                 {"training.global_batch_size", "gb"},
                 {"parallel.sequence_parallel", "sp"},
                 {"parallel.use_distributed_optimizer", "zero1"},
                 {"parallel.pipeline_schedule", "schedule"},
                 {"training.recompute", "recompute"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(key, names[i].key))
            return names[i].name;
    const char *dot = strrchr(key, '.');
    return dot ? dot + 1 : key;
}

/* Length of point i's chart label ("tp=2 pp=1 mb=4"). */
static size_t label_length(const tr_grid_spec *g, size_t i)
{
    size_t len = 0;
    for (int a = 0; a < g->n_axes; a++)
        len += strlen(short_key(g->axes[a].key)) + 1 + strlen(axis_value(g, i, a)) + 1;
    return len;
}

/* Horizontal bars: one row per point (label = its swept values), length = tokens/s; skipped
 * and failed points are listed with their status instead of a bar. */
int tr_sweep_write_svg(FILE *f, const tr_grid_spec *g, const tr_sweep_point *p, size_t n,
                       const char *title)
{
    size_t longest = 10;
    for (size_t i = 0; i < n; i++)
        if (label_length(g, i) > longest)
            longest = label_length(g, i);
    const int label_w = (int)(7 * longest), plot_w = 520, row_h = 18, top = 60, left = label_w + 20;
    double max_tps = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i].status == TR_POINT_OK && p[i].tokens_per_s > max_tps)
            max_tps = p[i].tokens_per_s;
    /* a round axis end: 1, 2 or 5 x 10^k */
    double step = max_tps > 0 ? pow(10, floor(log10(max_tps))) : 1;
    double axis_max = step;
    while (axis_max < max_tps)
        axis_max += step;
    size_t ylabel = 16;
    for (int a = 0; a < g->n_axes; a++)
        ylabel += strlen(short_key(g->axes[a].key)) + strlen(g->axes[a].key) + 5;
    int height = top + (int)n * row_h + 70, width = left + plot_w + 40;
    if ((int)(7 * ylabel) + 24 > width)
        width = (int)(7 * ylabel) + 24;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">trident sweep: ", left);
    xml_text(f, title);
    fprintf(f, "</text>\n");
    /* y axis label and x axis with ticks */
    fprintf(f, "<text x=\"12\" y=\"%d\" font-weight=\"bold\">layout point (", top - 10);
    for (int a = 0; a < g->n_axes; a++) {
        xml_text(f, short_key(g->axes[a].key));
        fputs(" = ", f);
        xml_text(f, g->axes[a].key);
        if (a + 1 < g->n_axes)
            fputs(", ", f);
    }
    fprintf(f, ")</text>\n");
    int axis_y = top + (int)n * row_h + 4;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, top - 4, left, axis_y);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, axis_y,
            left + plot_w, axis_y);
    for (int t = 0; t <= 5; t++) {
        int x = left + plot_w * t / 5;
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#bbb\"/>\n", x, top - 4, x, axis_y + 4);
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n", x, axis_y + 18,
                axis_max * t / 5);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-weight=\"bold\">tokens/s "
               "(median after warm-up; higher is better)</text>\n",
            left + plot_w / 2, axis_y + 40);
    for (size_t i = 0; i < n; i++) {
        int y = top + (int)i * row_h;
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 6, y + 13);
        for (int a = 0; a < g->n_axes; a++) {
            xml_text(f, short_key(g->axes[a].key));
            fputc('=', f);
            xml_text(f, axis_value(g, i, a));
            if (a + 1 < g->n_axes)
                fputs(" ", f);
        }
        fprintf(f, "</text>\n");
        if (p[i].status == TR_POINT_OK && axis_max > 0) {
            int w = (int)(plot_w * p[i].tokens_per_s / axis_max);
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#4878cf\"><title>",
                    left, y + 2, w, row_h - 4);
            fprintf(f, "dp %d tp %d pp %d: %.0f tokens/s, %.1f ms/iter</title></rect>\n", p[i].dp, p[i].tp,
                    p[i].pp, p[i].tokens_per_s, p[i].median_ms);
            fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\">%.0f</text>\n", left + w + 4, y + 13,
                    p[i].tokens_per_s);
        } else {
            fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"%s\" font-size=\"10\">%s</text>\n", left + 4, y + 13,
                    p[i].status == TR_POINT_FAILED ? "#c00" : "#888", p[i].status == TR_POINT_FAILED ? "failed" : "skipped");
        }
    }
    fprintf(f, "</svg>\n");
    return ferror(f) ? tr_fail(TR_ERR_IO, "writing chart.svg failed") : TR_OK;
}
