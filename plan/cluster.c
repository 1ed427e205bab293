/* Cluster presets and the config's `cluster` section resolved against them. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "plan/plan.h"
#include "plan/plan_internal.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

const char *const tr_plan_preset_names[] = {"a100-80gb", "h100-80gb", "h200", "cpu-host", NULL};

/* Figures per GPU unless said otherwise; bandwidths each direction. Sources: NVIDIA's
 * A100 / H100 / H200 datasheets (peak dense bf16, HBM bandwidth, SMs from the architecture
 * whitepapers), DGX A100 / DGX H100 system guides (NVLink per GPU, one 200 / 400 Gb/s NIC
 * per GPU). The efficiencies are the device's, not a run's: gemm_efficiency is the top of the
 * GEMM curve (a large square bf16 GEMM), hbm_efficiency what a streaming kernel reaches
 * (STREAM-like copies), intra/inter_efficiency NCCL's bus bandwidth over the link's;
 * tile_intensity and k_overhead shape the curve (plan/device.c). They were fitted once,
 * within those physical ranges, against the published runs of plan/references.c
 * (docs/planner.md).
 *  a100-80gb  DGX A100: 108 SMs, 312 TFLOP/s, 2039 GB/s HBM2e; NVLink 3 600 GB/s total =
 *             300 GB/s each way; 8 x 200 Gb/s HDR InfiniBand per node = 200 GB/s; 80 GiB.
 *  h100-80gb  H100 SXM: 132 SMs, 989 TFLOP/s, 3350 GB/s HBM3; NVLink 4 900 GB/s = 450 each
 *             way; 8 x 400 Gb/s NDR = 400 GB/s per node; 79.6 GiB (81559 MiB).
 *  h200       H100's compute and links with 140.4 GiB (143771 MiB) of HBM3e at 4800 GB/s.
 *  int_ops: 64 INT32 lanes an SM (Ampere, Hopper) x the clock of the dense peak (1.41 GHz,
 *             1.83 GHz: 312 = 108 SMs x 2048 bf16 FLOP a clock x 1.41e9).
 *  cpu-host   this development machine: 2 cores, OpenBLAS fp32 GEMM ~240 GFLOP/s with
 *             OPENBLAS_CORETYPE=SkylakeX for the whole node, shared by 8 rank processes;
 *             UCX shared memory ~4 GB/s; 24 GiB RAM shared by the ranks. No shape model:
 *             FLOPs / (peak x gemm_efficiency). */
static const tr_plan_cluster presets[] = {
    {.preset = "a100-80gb", .device = TR_PLAN_DEVICE_GPU, .nodes = 1, .gpus_per_node = 8,
     .memory_bytes = 80 * GIB, .reserved_bytes = 2 * GIB, .peak_flops = 312e12,
     .gemm_efficiency = 0.75, .intra_bw = 300e9, .intra_latency = 5e-6, .inter_bw = 200e9,
     .inter_latency = 10e-6, .sms = 108, .tile_intensity = 48, .k_overhead = 64,
     .hbm_bw = 2039e9, .hbm_efficiency = 0.7, .kernel_overhead_s = 3e-6,
     .int_ops = 108 * 64 * 1.41e9, .intra_efficiency = 0.77, .inter_efficiency = 0.9},
    {.preset = "h100-80gb", .device = TR_PLAN_DEVICE_GPU, .nodes = 1, .gpus_per_node = 8,
     .memory_bytes = 79.6 * GIB, .reserved_bytes = 2 * GIB, .peak_flops = 989e12,
     .gemm_efficiency = 0.67, .intra_bw = 450e9, .intra_latency = 5e-6, .inter_bw = 400e9,
     .inter_latency = 10e-6, .sms = 132, .tile_intensity = 80, .k_overhead = 64,
     .hbm_bw = 3350e9, .hbm_efficiency = 0.7, .kernel_overhead_s = 3e-6,
     .int_ops = 132 * 64 * 1.83e9, .intra_efficiency = 0.8, .inter_efficiency = 0.9},
    {.preset = "h200", .device = TR_PLAN_DEVICE_GPU, .nodes = 1, .gpus_per_node = 8,
     .memory_bytes = 140.4 * GIB, .reserved_bytes = 2 * GIB, .peak_flops = 989e12,
     .gemm_efficiency = 0.67, .intra_bw = 450e9, .intra_latency = 5e-6, .inter_bw = 400e9,
     .inter_latency = 10e-6, .sms = 132, .tile_intensity = 80, .k_overhead = 64,
     .hbm_bw = 4800e9, .hbm_efficiency = 0.7, .kernel_overhead_s = 3e-6,
     .int_ops = 132 * 64 * 1.83e9, .intra_efficiency = 0.8, .inter_efficiency = 0.9},
    {.preset = "cpu-host", .device = TR_PLAN_DEVICE_CPU, .nodes = 1, .gpus_per_node = 8,
     .memory_bytes = 24 * GIB, .reserved_bytes = 0.1 * GIB, .peak_flops = 240e9,
     .gemm_efficiency = 0.5, .intra_bw = 4e9, .intra_latency = 20e-6, .inter_bw = 1e9,
     .inter_latency = 50e-6, .intra_efficiency = 1, .inter_efficiency = 1},
};

int tr_plan_cluster_preset(const char *name, tr_plan_cluster *out)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (name && !strcmp(presets[i].preset, name)) {
            *out = presets[i];
            tr_plan_attach_gemm_table(out);
            return TR_OK;
        }
    return tr_fail(TR_ERR_CONFIG,
                   "unknown cluster preset '%s'; allowed: a100-80gb, h100-80gb, h200, cpu-host",
                   name ? name : "(null)");
}

/* Message prefix: where the key was set, else where the section is, else the file. */
static const char *where(const tr_config *cfg, const char *key, char *buf, size_t n)
{
    snprintf(buf, n, "%s", tr_config_where(cfg, key));
    return buf;
}

int tr_plan_cluster_from_config(const tr_config *cfg, tr_plan_cluster *out)
{
    const tr_cluster_config *k = &cfg->cluster;
    char at[1200];
    int has_preset = k->preset && strcmp(k->preset, "none");
    if (has_preset) {
        int rc = tr_plan_cluster_preset(k->preset, out);
        if (rc)
            return tr_fail_context(rc, "%s", where(cfg, "cluster.preset", at, sizeof at));
    } else {
        memset(out, 0, sizeof *out);
        snprintf(out->preset, sizeof out->preset, "custom");
        out->nodes = 1;
        out->gemm_efficiency = 0.5;
        out->intra_efficiency = out->inter_efficiency = 1; /* no shape model (sms 0) */
    }
    int custom = 0;
    if (k->nodes > 0)
        out->nodes = k->nodes; /* how many nodes is not a change of the node's hardware */
#define TAKE(field, value)                                                                     \
    do {                                                                                       \
        if ((value) > 0) {                                                                     \
            custom |= out->field != (value);                                                   \
            out->field = (value);                                                              \
        }                                                                                      \
    } while (0)
    TAKE(gpus_per_node, k->gpus_per_node);
    TAKE(memory_bytes, k->gpu_memory_gib * GIB);
    TAKE(reserved_bytes, k->reserved_memory_gib * GIB);
    TAKE(peak_flops, k->peak_tflops * 1e12);
    TAKE(gemm_efficiency, k->gemm_efficiency);
    TAKE(intra_bw, k->intra_node_gbytes_per_s * 1e9);
    TAKE(intra_latency, k->intra_node_latency_us * 1e-6);
    TAKE(inter_bw, k->inter_node_gbytes_per_s * 1e9);
    TAKE(inter_latency, k->inter_node_latency_us * 1e-6);
#undef TAKE
    if (k->device && strcmp(k->device, "auto")) {
        tr_plan_device dev = !strcmp(k->device, "cpu") ? TR_PLAN_DEVICE_CPU : TR_PLAN_DEVICE_GPU;
        custom |= dev != out->device;
        out->device = dev;
    }
    out->overridden = custom;
    /* Everything the model needs must now be known. */
    static const struct {
        const char *key;
        size_t off;
    } needed[] = {
        {"gpus_per_node", offsetof(tr_plan_cluster, gpus_per_node)},
        {"gpu_memory_gib", offsetof(tr_plan_cluster, memory_bytes)},
        {"peak_tflops", offsetof(tr_plan_cluster, peak_flops)},
        {"intra_node_gbytes_per_s", offsetof(tr_plan_cluster, intra_bw)},
        {"inter_node_gbytes_per_s", offsetof(tr_plan_cluster, inter_bw)},
    };
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++) {
        const char *p = (const char *)out + needed[i].off;
        double v = i == 0 ? (double)*(const int *)p : *(const double *)p;
        if (v <= 0) {
            char key[64];
            snprintf(key, sizeof key, "cluster.%s", needed[i].key);
            return tr_fail(TR_ERR_CONFIG,
                           "%s: cluster.%s is not set and no preset gives it; set "
                           "cluster.preset (a100-80gb, h100-80gb, h200, cpu-host) or cluster.%s",
                           where(cfg, has_preset ? "cluster.preset" : "cluster", at, sizeof at),
                           needed[i].key, needed[i].key);
        }
    }
    if (out->reserved_bytes >= out->memory_bytes)
        return tr_fail(TR_ERR_CONFIG,
                       "%s: cluster.reserved_memory_gib = %.3g is not less than the memory of a "
                       "%s (%.3g GiB); allowed: reserved < memory",
                       where(cfg, "cluster.reserved_memory_gib", at, sizeof at),
                       out->reserved_bytes / GIB,
                       out->device == TR_PLAN_DEVICE_CPU ? "node" : "GPU", out->memory_bytes / GIB);
    return TR_OK;
}
