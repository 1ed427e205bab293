/* Fuzz target evaltasks: a JSON Lines file of loglikelihood requests through
 * tr_eval_tasks_load (eval/tasks.c, one id a byte) and every request scored by a tiny random
 * GPT-2 (eval/score.c). Byte 0: the context, 1 + b0 % 16 tokens; byte 1: the vocabulary
 * limit, 100 + b1 (bytes above it are refused ids); the rest is the file. After a successful
 * load: every request has a context and continuations of 1 .. context ids below the limit, a
 * label in range or -1, lengths in code points >= 1; each choice's log-likelihood is finite
 * and <= 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "eval/eval.h"
#include "model/gpt.h"
#include "fuzz.h"

enum { MAX_T = 16, V = 256 };

static tr_gpt *tiny_model(void)
{
    static tr_gpt *g;
    static float *params;
    if (g)
        return g;
    tr_gpt_shape s = {.num_layers = 1, .C = 8, .NH = 2, .T = MAX_T, .max_T = MAX_T, .V = V,
                      .Vp = V, .eps = 1e-5f, .init_std = 0.5f, .seed = 3, .layer_first = 0,
                      .layer_count = 1, .is_first = 1, .is_last = 1, .tp_size = 1};
    fz_must(tr_gpt_create(&s, tr_kernels_cpu(), NULL, &g), "tiny model");
    params = calloc(tr_gpt_num_params(g), sizeof *params);
    if (!params)
        abort();
    tr_gpt_bind(g, params, NULL);
    fz_must(tr_gpt_init_params(g), "tiny model's init");
    return g;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int context = 1 + data[0] % MAX_T, vocab = 100 + data[1];
    fz_write("tasks.jsonl", data + 2, size - 2);
    char path[1024];
    fz_path(path, sizeof path, "tasks.jsonl");
    tr_eval_tasks tasks;
    if (tr_eval_tasks_load(path, NULL, 0, vocab, context, 64, &tasks))
        return 0;
    tr_evaluator *ev = NULL;
    fz_must(tr_evaluator_create(tiny_model(), context, &ev), "evaluator");
    for (size_t i = 0; i < tasks.n; i++) {
        const tr_eval_request *r = &tasks.r[i];
        if (r->n_ctx < 1 || r->n_choices < 1 || r->label < -1 || r->label >= r->n_choices ||
            (r->label == -1 && r->n_choices != 1))
            abort();
        for (int j = 0; j < r->n_ctx; j++)
            if (r->ctx[j] < 0 || r->ctx[j] >= vocab)
                abort();
        for (int c = 0; c < r->n_choices; c++) {
            if (r->n_cont[c] < 1 || r->n_cont[c] > context || r->chars[c] < 1)
                abort();
            for (int j = 0; j < r->n_cont[c]; j++)
                if (r->cont[c][j] < 0 || r->cont[c][j] >= vocab)
                    abort();
        }
        double *ll = malloc((size_t)r->n_choices * sizeof *ll);
        unsigned char *greedy = malloc((size_t)r->n_choices);
        if (!ll || !greedy)
            abort();
        fz_must(tr_eval_request_score(ev, r, ll, greedy), "scoring a loaded request");
        for (int c = 0; c < r->n_choices; c++)
            if (!isfinite(ll[c]) || ll[c] > 0)
                abort();
        int best = tr_eval_argmax(ll, r->chars, r->n_choices, 1);
        if (best < 0 || best >= r->n_choices)
            abort();
        free(ll);
        free(greedy);
    }
    tr_evaluator_free(ev);
    tr_eval_tasks_free(&tasks);
    return 0;
}
