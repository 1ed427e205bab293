/* `trident train` for one process: resume, the training loop, evaluation and checkpoints.
 * What the run reports (console, metrics.jsonl, TensorBoard, summary.json, trace) is in
 * report.c and trace.c. */
#include "train/train.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "hf/hf.h"
#include "train/engine_internal.h" /* ZeRO-3 around checkpoints */
#include "train/report.h"

/* training.exit_signal_handler: SIGTERM (Slurm's warning before preemption or the time
 * limit) only sets a flag; the loop stops after the iteration in progress. */
static volatile sig_atomic_t stop_requested;

static void on_sigterm(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static int install_exit_signal_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sa.sa_flags = SA_RESTART; /* the communication library's waits carry on undisturbed */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL))
        return tr_fail(TR_ERR_INTERNAL, "cannot install the SIGTERM handler");
    return TR_OK;
}

/* Validation every eval_interval iterations and after the last one (of `total`). */
static int should_eval(const tr_training_config *t, int it, int total)
{
    return t->eval_interval > 0 && (it % t->eval_interval == 0 || it == total);
}

/* A checkpoint every save_interval iterations and when this process stops; with a ramp-up
 * also before the global batch grows (Megatron saves when the number of micro-batches
 * changes, so a job can restart on more nodes for the larger batches). */
static int should_save(const tr_config *cfg, const tr_engine *e, int it, int last)
{
    const tr_checkpoint_config *ck = &cfg->checkpoint;
    const tr_training_config *t = &cfg->training;
    int grows = t->n_rampup_batch_size &&
                tr_training_batch_at(t, e->consumed_samples) != e->batch;
    return *ck->save &&
           (it == last || grows || (ck->save_interval > 0 && it % ck->save_interval == 0));
}

/* A console line every log_interval iterations, on the first and the last, and with a
 * validation loss. */
static int should_log(const tr_config *cfg, const tr_step_stats *s, int total)
{
    int every = cfg->logging.log_interval > 0 ? cfg->logging.log_interval : 1;
    int it = s->iteration;
    return it % every == 0 || it == 1 || it == total || s->evaluated;
}

/* The last iteration this process runs: the run's `total`, or the next exit_interval. */
static int last_iteration(const tr_training_config *t, int start, int total)
{
    if (t->exit_interval <= 0)
        return total;
    long long next_exit = (start / t->exit_interval + 1) * (long long)t->exit_interval;
    return next_exit < total ? (int)next_exit : total;
}

/* finetune.load naming a Hugging Face folder: the lead rank imports it (tr_hf_import, as
 * `trident convert --from hf`) into RUN_DIR/hf-base while the others wait, and every rank
 * then reads its shards from there (*base). Without a run folder each rank imports into a
 * folder of its own under TMPDIR (*cleanup: remove it after loading). */
static int base_from_hf(tr_engine *e, const char *run_dir, int lead, const char **base,
                        char *buf, size_t cap, int *cleanup)
{
    *cleanup = 0;
    if (!tr_hf_is_model_folder(*base))
        return TR_OK;
    int rc = TR_OK, own = !run_dir;
    if (own)
        tr_hf_temp_import_dir(buf, cap);
    else
        snprintf(buf, cap, "%s/hf-base", run_dir);
    if (own || lead)
        rc = tr_hf_import_replacing(*base, buf);
    if (!own) /* every rank learns whether the import worked before reading it */
        rc = tr_engine_agree(e, rc, "importing the base model");
    *base = buf;
    *cleanup = own;
    return rc;
}

/* Resume from checkpoint.load when it is set: *start = its iteration (0 when none, or for
 * a release checkpoint: imported weights). */
static int resume(tr_engine *e, const tr_config *cfg, const char *run_dir, int lead, int quiet,
                  int *start)
{
    const char *dir = cfg->checkpoint.load, *base = cfg->finetune.load;
    *start = 0;
    if (*base) { /* the base model (LoRA: into the frozen tensors, else the parameters) */
        double t0 = tr_now();
        const char *named = base;
        char imported[4200];
        int cleanup = 0;
        int rc = base_from_hf(e, run_dir, lead, &base, imported, sizeof imported, &cleanup);
        for (int c = 0; c < e->v && !rc; c++)
            rc = tr_checkpoint_load_base(base, e->chunks[c].model, e->k);
        if (!rc && lead) { /* the rates the base was trained with against the config's */
            char what[4400];
            snprintf(what, sizeof what, "finetune.load %s%s", named,
                     base != named ? " (a Hugging Face folder: its config.json's dropout keys)"
                                   : "");
            tr_checkpoint_note_dropout(base, what, tr_gpt_get_shape(e->chunks[0].model));
        }
        if (cleanup && tr_hf_remove_import(base))
            tr_warn("could not remove the imported base %s", base);
        if (rc)
            return tr_fail_context(rc, "%s: finetune.load (the base model: a trident checkpoint"
                                   " or a Hugging Face folder)",
                                   tr_config_where(cfg, "finetune.load"));
        if (lead && !quiet)
            printf("trident: loaded the base model of %s%s in %.2f s%s\n", named,
                   base != named ? " (a Hugging Face folder, imported)" : "", tr_now() - t0,
                   cfg->finetune.lora_rank ? " (frozen; LoRA adapters trained)" : "");
    }
    if (!*dir)
        return TR_OK;
    double t0 = tr_now();
    /* ZeRO-3: the whole parameters in place while the checkpoint is read, then this rank's
     * blocks kept (the checkpoint's layout is free of ZeRO) */
    int it = -1, rc = zero_params_materialize(e);
    if (!rc)
        rc = tr_checkpoint_load(e, dir, &it);
    int rc2 = zero_params_release(e, !rc);
    rc = rc ? rc : rc2;
    *start = it > 0 ? it : 0;
    if (rc || !lead || quiet)
        return rc;
    if (it > 0)
        printf("trident: resumed from %s/iter_%07d (iteration %d) in %.2f s\n", dir, it, it,
               tr_now() - t0);
    else if (it == 0)
        printf("trident: loaded the weights of %s/release (no optimizer state) in %.2f s: "
               "starting from iteration 0\n", dir, tr_now() - t0);
    else
        printf("trident: no checkpoint in %s (no latest_checkpointed_iteration.txt): "
               "starting from iteration 0\n", dir);
    return TR_OK;
}

static int save(tr_engine *e, const tr_checkpoint_config *ck, int it, int lead, int quiet)
{
    double t0 = tr_now();
    int rc = zero_params_materialize(e); /* ZeRO-3: saved whole (staged, then given back) */
    if (!rc)
        rc = tr_checkpoint_save(e, ck->save, it);
    int rc2 = zero_params_release(e, 0);
    rc = rc ? rc : rc2;
    if (!rc && lead && !quiet) {
        printf("trident: saved checkpoint %s/iter_%07d in %.2f s\n", ck->save, it, tr_now() - t0);
        fflush(stdout);
    }
    return rc;
}

int tr_train_run(const tr_config *cfg, const tr_train_options *opts)
{
    double t0 = tr_now();
    const tr_training_config *t = &cfg->training;
    const tr_checkpoint_config *ck = &cfg->checkpoint;
    tr_engine *e = NULL;
    train_report *report = NULL;
    int start = 0, last = 0;
    /* train_iters, or Megatron's count of train_samples (the config checked it fits an int) */
    int total = (int)tr_training_iterations(t);
    int rc = tr_engine_create(cfg, &e);
    if (rc)
        return rc;
    int lead = tr_engine_rank(e) == 0;
    if (t->exit_signal_handler)
        rc = install_exit_signal_handler();
    if (!rc && !(rc = resume(e, cfg, opts->run_dir, lead, opts->quiet, &start))) {
        last = last_iteration(t, start, total);
        rc = train_report_open(e, opts, start, last, t0, &report);
    }
    for (int it = start + 1; it <= last && !rc; it++) {
        tr_step_stats s = {.iteration = it};
        train_report_iteration_begin(report, it);
        double t_iter = tr_now();
        rc = tr_engine_forward_backward(e, it, &s.loss);
        if (!rc && it == 1 && opts->dump_grads_dir)
            rc = train_dump_gradients(e, opts->dump_grads_dir);
        if (!rc && it > 1 && it <= opts->dump_grads_iters && opts->dump_grads_dir) {
            char sub[4200];
            snprintf(sub, sizeof sub, "%s/iter_%d", opts->dump_grads_dir, it);
            rc = train_dump_gradients(e, sub);
        }
        if (!rc)
            rc = tr_engine_optimizer_step(e, it, &s);
        if (!rc)
            rc = train_report_measure(report, &s, tr_now() - t_iter);
        if (!rc && should_eval(t, it, total)) {
            rc = tr_engine_evaluate(e, &s.val_loss);
            s.evaluated = 1;
        }
        if (!rc)
            rc = train_report_record(report, &s);
        if (!rc && should_log(cfg, &s, total))
            train_report_print(report, &s);
        /* a stop request on any rank, or the time limit passed on any rank, ends the run
         * after this iteration, on every rank */
        int signalled = 0, expired = 0;
        if (!rc && t->exit_signal_handler)
            rc = tr_engine_any_rank(e, stop_requested, &signalled);
        if (!rc && t->exit_duration_in_mins > 0)
            rc = tr_engine_any_rank(e, (tr_now() - t0) / 60 > t->exit_duration_in_mins, &expired);
        int stop = signalled || expired;
        if (!rc && (should_save(cfg, e, it, last) || (stop && *ck->save)))
            rc = save(e, ck, it, lead, opts->quiet);
        if (!rc) /* a save written in the background: finished once every rank's part is */
            rc = tr_checkpoint_poll(e, it == last || stop);
        if (!rc && stop) {
            if (lead && !opts->quiet) {
                char why[96];
                if (signalled)
                    snprintf(why, sizeof why, "SIGTERM");
                else
                    snprintf(why, sizeof why, "training.exit_duration_in_mins %g: %.2f minutes",
                             t->exit_duration_in_mins, (tr_now() - t0) / 60);
                printf("trident: %s: stopped after iteration %d%s\n", why, it,
                       *ck->save ? " (checkpoint saved)" : " (no checkpoint.save: nothing saved)");
            }
            last = it;
            break;
        }
        if (!rc && it == last && last < total && lead && !opts->quiet)
            printf("trident: exiting after iteration %d (training.exit_interval %d)\n", it,
                   t->exit_interval);
    }
    if (!rc)
        rc = train_report_finish(report);
    train_report_close(report);
    tr_engine_free(e);
    return rc;
}
