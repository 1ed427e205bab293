/* `trident topo --world-size W --tp T --pp P [--cp C] [--ep E] [--order O] [--gpus-per-node G]
 * [--config FILE] [--json]`: print every process group of a layout, and where the groups sit
 * on nodes. With CP 1 and EP 1 the output is the 3-D layout's, byte for byte (no CP or EP
 * lines or keys). */
#include "launch/commands.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "launch/args.h"
#include "topo/topo.h"
#include "yaml/config.h"

#define RANK_TABLE_MAX 256 /* the per-rank table is printed for worlds up to this size */

static void topo_usage(FILE *f)
{
    fprintf(f,
            "usage: trident topo --world-size W [--tp T] [--pp P] [options]\n"
            "\n"
            "Print the process groups of a data x tensor x pipeline layout of W ranks\n"
            "(DP = W / (TP * PP)): tensor, data, pipeline, model-parallel (TP x PP) and\n"
            "embedding (first and last stage of each pipeline) groups.\n"
            "\n"
            "options:\n"
            "  --world-size W       number of ranks (required)\n"
            "  --tp T               tensor model parallel size (default 1)\n"
            "  --pp P               pipeline model parallel size (default 1)\n"
            "  --cp C               context parallel size (default 1): C ranks split each\n"
            "                       sample's sequence; adds the cp and dp_cp (gradient)\n"
            "                       groups, and CP sits right after TP in the rank order\n"
            "  --ep E               expert parallel size (default 1, divides DP): adds the ep\n"
            "                       (E consecutive dp coordinates exchanging tokens) and edp\n"
            "                       (the ranks holding the same experts) groups\n"
            "  --order ORDER        tp-dp-pp (default, Megatron: global = tp + dp*TP + pp*TP*DP)\n"
            "                       or tp-pp-dp\n"
            "  --config FILE        take TP, PP, CP, EP and the order from a YAML config's\n"
            "                       parallel section (flags given explicitly win)\n"
            "  --gpus-per-node G    place ranks on nodes of G consecutive ranks; report which\n"
            "                       groups cross nodes and warn when a TP group does\n"
            "  --json               one JSON object: tp_groups, dp_groups, pp_groups,\n"
            "                       model_parallel_groups, embedding_groups (lists of rank\n"
            "                       lists sorted by first rank) and the sizes; with CP > 1\n"
            "                       also context_parallel_size, cp_groups, dp_cp_groups;\n"
            "                       with EP > 1 expert_model_parallel_size, ep_groups,\n"
            "                       edp_groups\n"
            "  -h, --help           this text\n"
            "\n"
            "Exit status: 0 success, 2 bad usage or impossible layout.\n");
}

/* Nodes an ascending member list spans when nodes hold G consecutive ranks. */
static int row_nodes(const int *row, int size, int gpus_per_node)
{
    int nodes = 0, last = -1;
    for (int i = 0; i < size; i++)
        if (row[i] / gpus_per_node != last)
            nodes++, last = row[i] / gpus_per_node;
    return nodes;
}

static void print_group_list(const tr_topo_table *tab, tr_group_kind kind, int gpus_per_node)
{
    int n = tab->num_groups[kind], size = tab->group_size[kind];
    printf("%s groups (%d of %d rank%s", tr_group_kind_name(kind), n, size, size == 1 ? "" : "s");
    if (gpus_per_node > 0) {
        int crossing = 0;
        for (int g = 0; g < n; g++)
            crossing += row_nodes(tr_topo_table_group(tab, kind, g), size, gpus_per_node) > 1;
        printf("; %d cross nodes", crossing);
    }
    printf("):\n ");
    int col = 1;
    for (int g = 0; g < n; g++) {
        const int *row = tr_topo_table_group(tab, kind, g);
        char item[64];
        int len = 0;
        /* Long groups are written out in full; lines wrap between groups near 96 columns. */
        if (col > 1 && col + 2 + 8 * size > 96) {
            printf("\n ");
            col = 1;
        }
        col += printf(" [");
        for (int i = 0; i < size; i++) {
            len = snprintf(item, sizeof item, "%s%d", i ? "," : "", row[i]);
            fputs(item, stdout);
            col += len;
        }
        int crosses = gpus_per_node > 0 && row_nodes(row, size, gpus_per_node) > 1;
        col += printf("]%s", crosses ? "*" : "");
    }
    printf("\n");
}

/* The group kinds printed: the CP ones only when CP > 1 and the EP ones only when EP > 1, so a
 * 3-D layout's output is what it was before those dimensions existed. */
static int kind_shown(const tr_topo *t, int k)
{
    if (k == TR_GROUP_CP || k == TR_GROUP_DP_CP)
        return t->cp > 1;
    if (k == TR_GROUP_EP || k == TR_GROUP_EDP)
        return t->ep > 1;
    return 1;
}

static void print_human(const tr_topo_table *tab, int gpus_per_node, const tr_node_report *rep)
{
    const tr_topo *t = &tab->topo;
    int cp = t->cp > 1;
    if (cp)
        printf("world %d = dp %d x cp %d x tp %d x pp %d, order %s (global = tp + cp*%d",
               t->world, t->dp, t->cp, t->tp, t->pp, tr_topo_order_name(t->order), t->stride_cp);
    else
        printf("world %d = dp %d x tp %d x pp %d, order %s (global = tp", t->world, t->dp, t->tp,
               t->pp, tr_topo_order_name(t->order));
    if (t->order == TR_ORDER_TP_DP_PP)
        printf(" + dp*%d + pp*%d)\n", t->stride_dp, t->stride_pp);
    else
        printf(" + pp*%d + dp*%d)\n", t->stride_pp, t->stride_dp);
    if (gpus_per_node > 0)
        printf("%d GPUs per node: %d node%s (ranks placed in blocks); * marks a group that "
               "crosses nodes\n",
               gpus_per_node, rep->num_nodes, rep->num_nodes == 1 ? "" : "s");
    else
        printf("node placement: not given (--gpus-per-node G)\n");
    printf("\n");
    if (t->ep > 1)
        printf("expert parallel %d: dp = edp*%d + ep; ep rank r holds experts [r E/%d, (r+1) "
               "E/%d)\n",
               t->ep, t->ep, t->ep, t->ep);
    if (t->world <= RANK_TABLE_MAX) {
        printf("%6s %5s %5s%s %5s %5s  %s\n", "rank", "node", "dp", cp ? "    cp" : "", "tp",
               "pp", "stage");
        for (int r = 0; r < t->world; r++) {
            tr_coords c = tr_topo_coords(t, r);
            char node[16] = "-";
            if (gpus_per_node > 0)
                snprintf(node, sizeof node, "%d", tr_topo_node_of(t, gpus_per_node, r));
            const char *stage = t->pp == 1 ? "first+last"
                                : c.pp == 0 ? "first"
                                : c.pp == t->pp - 1 ? "last"
                                                    : "";
            char cpcol[16] = "";
            if (cp)
                snprintf(cpcol, sizeof cpcol, " %5d", c.cp);
            printf("%6d %5s %5d%s %5d %5d%s%s\n", r, node, c.dp, cpcol, c.tp, c.pp,
                   *stage ? "  " : "", stage);
        }
    } else {
        printf("(per-rank table left out for more than %d ranks; rank r has tp = r %% %d)\n",
               RANK_TABLE_MAX, t->tp);
    }
    for (int k = 0; k < TR_GROUP_KINDS; k++) {
        if (!kind_shown(t, k))
            continue;
        printf("\n");
        print_group_list(tab, (tr_group_kind)k, gpus_per_node);
    }
    if (gpus_per_node > 0) {
        printf("\nnodes spanned (most by one group): ");
        for (int k = 0; k < TR_GROUP_KINDS; k++)
            if (kind_shown(t, k))
                printf("%s%s %d", k ? ", " : "", tr_group_kind_name((tr_group_kind)k),
                       rep->max_nodes[k]);
        printf("\n");
    }
}

static void print_json(const tr_topo_table *tab, int gpus_per_node, const tr_node_report *rep)
{
    const tr_topo *t = &tab->topo;
    static const char *keys[TR_GROUP_KINDS] = {"tp_groups", "dp_groups", "pp_groups",
                                               "model_parallel_groups", "embedding_groups",
                                               "cp_groups", "dp_cp_groups", "ep_groups",
                                               "edp_groups"};
    tr_json j;
    tr_json_begin(&j, stdout);
    tr_json_object_begin(&j, NULL);
    tr_json_int(&j, "world_size", t->world);
    tr_json_int(&j, "tensor_model_parallel_size", t->tp);
    tr_json_int(&j, "pipeline_model_parallel_size", t->pp);
    tr_json_int(&j, "data_parallel_size", t->dp);
    if (t->cp > 1)
        tr_json_int(&j, "context_parallel_size", t->cp);
    if (t->ep > 1)
        tr_json_int(&j, "expert_model_parallel_size", t->ep);
    tr_json_string(&j, "order", tr_topo_order_name(t->order));
    for (int k = 0; k < TR_GROUP_KINDS; k++) {
        if (!kind_shown(t, k))
            continue;
        tr_json_array_begin(&j, keys[k]);
        for (int g = 0; g < tab->num_groups[k]; g++) {
            const int *row = tr_topo_table_group(tab, (tr_group_kind)k, g);
            tr_json_array_begin(&j, NULL);
            for (int i = 0; i < tab->group_size[k]; i++)
                tr_json_int(&j, NULL, row[i]);
            tr_json_array_end(&j);
        }
        tr_json_array_end(&j);
    }
    if (gpus_per_node > 0) {
        tr_json_int(&j, "gpus_per_node", gpus_per_node);
        tr_json_int(&j, "num_nodes", rep->num_nodes);
        tr_json_object_begin(&j, "groups_crossing_nodes");
        for (int k = 0; k < TR_GROUP_KINDS; k++)
            if (kind_shown(t, k))
                tr_json_int(&j, tr_group_kind_name((tr_group_kind)k), rep->crossing[k]);
        tr_json_object_end(&j);
    }
    tr_json_object_end(&j);
    fputc('\n', stdout);
}

/* Sizes from --config FILE; flags given on the command line take precedence. */
static int sizes_from_config(const char *path, int *tp, int *pp, int *cp, int *ep, char **order,
                             char *where, size_t where_cap)
{
    tr_config cfg;
    if (tr_config_load(path, NULL, 0, &cfg)) {
        fprintf(stderr, "trident topo: %s\n", tr_errmsg());
        return 2;
    }
    /* Where the parallel sizes came from, for a layout error. */
    if (*tp < 0 || *pp < 0)
        snprintf(where, where_cap, "%s: ",
                 tr_config_where(&cfg, *tp < 0 ? "parallel.tensor_model_parallel_size"
                                               : "parallel.pipeline_model_parallel_size"));
    if (*tp < 0)
        *tp = cfg.parallel.tensor_model_parallel_size;
    if (*pp < 0)
        *pp = cfg.parallel.pipeline_model_parallel_size;
    if (*cp < 0)
        *cp = cfg.parallel.context_parallel_size;
    if (*ep < 0)
        *ep = cfg.parallel.expert_model_parallel_size;
    if (!*order && cfg.parallel.order)
        *order = strdup(cfg.parallel.order);
    tr_config_free(&cfg);
    return 0;
}

int tr_cmd_topo(int argc, char **argv)
{
    enum { WORLD, TP, PP, GPUS_PER_NODE, CONFIG, ORDER, JSON, CP, EP };
    static const arg_opt options[] = {
        [WORLD] = {.name = "--world-size", .kind = ARG_VALUE},
        [TP] = {.name = "--tp", .kind = ARG_VALUE},
        [PP] = {.name = "--pp", .kind = ARG_VALUE},
        [GPUS_PER_NODE] = {.name = "--gpus-per-node", .kind = ARG_VALUE},
        [CONFIG] = {.name = "--config", .kind = ARG_VALUE},
        [ORDER] = {.name = "--order", .kind = ARG_VALUE},
        [JSON] = {.name = "--json", .kind = ARG_FLAG},
        [CP] = {.name = "--cp", .kind = ARG_VALUE},
        [EP] = {.name = "--ep", .kind = ARG_VALUE},
        {.name = NULL},
    };
    arg_parser a = {.cmd = "trident topo", .opts = options, .usage = topo_usage, .argc = argc,
                 .argv = argv};
    int world = -1, tp = -1, pp = -1, cp = -1, ep = -1, gpus_per_node = 0, json = 0, rc = 0, o;
    const char *config_path = NULL, *order_arg = NULL, *v;
    while (!rc && (o = args_next(&a, &v)) != ARGS_END) {
        if (o == ARGS_HELP || o == ARGS_ERROR)
            return o == ARGS_HELP ? 0 : 2;
        if (o == ARGS_POSITIONAL)
            rc = args_error(&a, "unknown argument '%s' (see trident topo --help)", v);
        else if (o == JSON)
            json = 1;
        else if (o == CONFIG)
            config_path = v;
        else if (o == ORDER)
            order_arg = v;
        else
            rc = args_int(&a, options[o].name, v, 1, INT_MAX,
                          o == WORLD ? &world
                          : o == TP  ? &tp
                          : o == PP  ? &pp
                          : o == CP  ? &cp
                          : o == EP  ? &ep
                                     : &gpus_per_node);
    }
    if (!rc && world < 0)
        rc = args_error(&a, "--world-size is required (see trident topo --help)");
    if (rc)
        return rc;
    char *order = order_arg ? strdup(order_arg) : NULL;
    char where[512] = "";
    if (config_path)
        rc = sizes_from_config(config_path, &tp, &pp, &cp, &ep, &order, where, sizeof where);
    if (rc) {
        free(order);
        return rc;
    }
    tr_topo t;
    if (tr_topo_init_ep(&t, world, tp < 0 ? 1 : tp, cp < 0 ? 1 : cp, pp < 0 ? 1 : pp,
                        ep < 0 ? 1 : ep, order)) {
        fprintf(stderr, "trident topo: %s%s\n", where, tr_errmsg());
        free(order);
        return 2;
    }
    free(order);
    tr_topo_table tab;
    if (tr_topo_table_build(&t, &tab)) {
        fprintf(stderr, "trident topo: %s\n", tr_errmsg());
        return 1;
    }
    tr_node_report rep = {0};
    if (gpus_per_node > 0) {
        if (tr_topo_node_report(&t, gpus_per_node, &rep)) {
            fprintf(stderr, "trident topo: %s\n", tr_errmsg());
            tr_topo_table_free(&tab);
            return 1;
        }
        if (rep.warning[0])
            tr_warn("%s", rep.warning);
    }
    if (json)
        print_json(&tab, gpus_per_node, &rep);
    else
        print_human(&tab, gpus_per_node, &rep);
    tr_topo_table_free(&tab);
    if (fflush(stdout)) {
        fprintf(stderr, "trident topo: cannot write the output\n");
        return 1;
    }
    return 0;
}
