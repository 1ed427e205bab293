/* train/ internals: what `trident train` reports, kept out of the loop (run.c).
 *
 *  report.c: the console header and per-iteration line (with the ETA), RUN_DIR/config.yaml,
 *    RUN_DIR/metrics.jsonl (kept up to the resumed iteration and continued), TensorBoard
 *    events (logging.tensorboard_dir), RUN_DIR/summary.json at the end. Files are written
 *    by rank 0; what they hold is measured over every rank (collective calls say so).
 *  summary.c: RUN_DIR/summary.json at the end.
 *  trace.c: the timeline of the last iteration (RUN_DIR/trace.json), the measured pipeline
 *    bubble, and the gradient dump that layout tests read.
 * Not part of train/'s contract; the engine's internals stay in engine_internal.h. */
#ifndef TR_TRAIN_REPORT_H
#define TR_TRAIN_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "train/train.h"

typedef struct train_report train_report;

/* Collective. Rank 0 sets up RUN_DIR (config.yaml; metrics.jsonl with the lines of
 * iterations 1..start) and the TensorBoard writer, and every rank learns whether it could;
 * counts the whole model's parameters; prints the header (t0: when setup began). The run
 * goes on with iterations start+1..last. */
TR_MUST_CHECK int train_report_open(tr_engine *e, const tr_train_options *opts, int start,
                                    int last, double t0, train_report **out);
/* Before iteration `it` runs. */
void train_report_iteration_begin(train_report *r, int it);
/* Collective, after the optimizer step of s->iteration, which took `secs`: fills the
 * timing, throughput, ETA and peak memory (the largest of any rank) of *s, and adds the
 * iteration to the run's measurements (ms/iter, data-parallel wait, pipeline bubble). */
TR_MUST_CHECK int train_report_measure(train_report *r, tr_step_stats *s, double secs);
/* metrics.jsonl and TensorBoard (rank 0): every iteration. */
TR_MUST_CHECK int train_report_record(train_report *r, const tr_step_stats *s);
/* The console line (rank 0, unless quiet). */
void train_report_print(train_report *r, const tr_step_stats *s);
/* Collective, after the last iteration: trace.json, summary.json, the closing lines. */
TR_MUST_CHECK int train_report_finish(train_report *r);
void train_report_close(train_report *r);

/* DIR/NAME opened with fopen's mode; NULL with TR_ERR_IO set naming the path. */
FILE *train_open_file(const char *dir, const char *name, const char *mode);
/* Flush and close an output opened by train_open_file: TR_ERR_IO naming DIR/NAME when any
 * write, the flush or the close failed (a full disk: the run stops rather than claiming
 * output it did not write). */
TR_MUST_CHECK int train_close_file(FILE *f, const char *dir, const char *name);

/* summary.c: RUN_DIR/summary.json, what a sweep records of a run: every rank's peak memory
 * (by the planner's parts), stored activations, the last iteration's operations per group
 * and ZeRO's traffic, all-gathered and written by rank 0 whole (a temporary, renamed). */
typedef struct train_summary train_summary;
typedef struct {
    const char *dir;        /* RUN_DIR */
    int lead;               /* rank 0: writes the file */
    int ran;                /* iterations run by this process: their times in iter_ms, the */
    const double *iter_ms;  /* tokens each trained in iter_tokens (a ramp-up's own batches) */
    const double *iter_tokens;
    double final_loss;
    double dp_exposed;      /* seconds of data-parallel wait after backward, iterations 2.. */
    double bubble;          /* the measured pipeline bubble; < 0: not traced */
} train_summary_run;
TR_MUST_CHECK int train_summary_create(train_summary **out);
void train_summary_free(train_summary *s);
/* Around the last iteration: the groups' operation counts between the two calls. */
void train_summary_last_iteration_begin(train_summary *s, const tr_engine *e);
void train_summary_last_iteration_end(train_summary *s, const tr_engine *e);
/* Collective, after the last iteration: measures this rank's memory, gathers every rank's
 * figures, and rank 0 writes RUN_DIR/summary.json. */
TR_MUST_CHECK int train_summary_write(train_summary *s, tr_engine *e,
                                      const train_summary_run *run);
/* The closing line: rank 0's collectives per group and pipeline sends + receives in the
 * last iteration. */
void train_summary_print_operations(const train_summary *s);
/* Peak resident memory of this process, MiB; the median of v[0..n) (0 when n is 0, -1 when
 * out of memory). */
double train_peak_rss_mb(void);
double train_median(const double *v, int n);

/* tensorboard.c: one event file in DIR (created), its first record the file version; every
 * scalar one record, written whole. Status-returning calls fail with TR_ERR_IO naming the
 * file. */
typedef struct train_tb train_tb;
TR_MUST_CHECK int train_tb_open(const char *dir, double wall_time, train_tb **out);
TR_MUST_CHECK int train_tb_scalar(train_tb *w, const char *tag, long long step, double wall_time,
                                  float value);
void train_tb_close(train_tb *w);
/* The pieces, for tests: CRC-32C, and one Event (tag NULL: the file-version event) into
 * out[cap], returning its size (> cap: it did not fit). */
uint32_t train_crc32c(const void *data, size_t n);
size_t train_tb_encode_event(uint8_t *out, size_t cap, double wall_time, long long step,
                             const char *tag, float value);

/* trace.c */
/* Collective over the pipeline group: the idle share of the stages' time in the traced
 * iteration. */
TR_MUST_CHECK int train_trace_bubble(tr_engine *e, double *bubble);
/* Collective: every rank writes its spans, rank 0 merges them into DIR/trace.json. */
TR_MUST_CHECK int train_trace_write(tr_engine *e, const char *dir);
/* DIR/grads.rankR.bin + .json: this rank's gradient and its shard layout. */
TR_MUST_CHECK int train_dump_gradients(tr_engine *e, const char *dir);

#endif
