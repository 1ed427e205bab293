// cuDNN's fused attention for the bf16 mode (attention_cudnn.h: the switch, what it takes, the
// layouts), through the cuDNN frontend's graph API with the library loaded at run time
// (dlopen of libcudnn.so.9, or TRIDENT_CUDNN_LIBRARY=PATH): a build needs cuDNN's and the
// frontend's headers only, and a machine without the library runs trident's own kernels.
//   forward:  sdpa(Q, K, V; causal, scale 1/sqrt(HS)) -> O (bf16), stats = lse (fp32)
//   backward: sdpa_backward(Q, K, V, O, dO, stats; deterministic unless the switch is
//             cudnn-nondeterministic) -> dQ, dK, dV (bf16)
// One graph per (pass, B, T, NH, HS), built on first use and kept; one cudnnHandle_t, its
// stream set on each call, under one mutex (graphs run one at a time; the workspace is one
// device buffer grown to the largest graph's need, outside the arena (cu_grow_buffer, as
// flash_mma.cu's scratch); on Hopper the deterministic backward keeps dP there, B NH T^2
// bf16: 3.2 GB at gpt2-124m's micro-batch 128, or trident's kernels run where cudaMalloc
// cannot have it). A graph cuDNN refuses is remembered as refused: the caller's kernels run
// for that shape from then on, and the reason is printed once per shape.
#include "kernels/cuda/attention_cudnn.h"

#include <cudnn.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING 1
#define CUDNN_FRONTEND_SKIP_JSON_LIB 1
#include <cudnn_frontend.h>

#include "kernels/cuda/cuda_internal.h"

// The frontend's dynamic loading calls through this handle (its declaration is the frontend's).
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
}

namespace {

namespace fe = cudnn_frontend;

enum Uid : int64_t { Q = 1, K, V, O, STATS, DO, DQ, DK, DV };

struct Entry {
    std::shared_ptr<fe::graph::Graph> graph; // null: refused
    int64_t workspace = 0;
};

std::mutex mu;
cudnnHandle_t handle = nullptr;
bool load_failed = false; // (loaded: handle set)
// (on the heap, never destroyed: cuDNN's descriptors must not be freed after CUDA's own exit
// handlers have run)
auto &graphs = *new std::map<std::tuple<int, int, int, int, int>, Entry>;
void *workspace = nullptr;
size_t workspace_have = 0;
long n_ran = 0, n_refused = 0; // tr_cuda_cudnn_attention_counts

// dlopen cuDNN, once (mu held): NULL, or why not. NVRTC too where it loads (RTLD_GLOBAL, from
// the program's RPATH): cuDNN compiles some attention engines at run time and dlopens it by
// name, which then finds this copy whatever cuDNN's own search path holds.
const char *load()
{
    static std::string failed;
    if (fe::cudnn_dlhandle)
        return nullptr;
    if (!failed.empty())
        return failed.c_str();
    const char *lib = getenv("TRIDENT_CUDNN_LIBRARY");
    lib = lib && *lib ? lib : "libcudnn.so.9";
    void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *e = dlerror();
        failed = std::string(lib) + " does not load (" + (e ? e : "?") + ")";
        return failed.c_str();
    }
    for (const char *nvrtc : {"libnvrtc.so.13", "libnvrtc.so.12"})
        if (dlopen(nvrtc, RTLD_NOW | RTLD_GLOBAL))
            break;
    // The frontend dlopens a CUDA runtime of its own choosing (libcudart.so.12 before .13)
    // unless told which: the one trident runs on, so that both see the same device
    Dl_info cudart;
    if (dladdr(reinterpret_cast<void *>(&cudaGetDevice), &cudart) && cudart.dli_fname &&
        strstr(cudart.dli_fname, "libcudart"))
        setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", cudart.dli_fname, 0);
    fe::cudnn_dlhandle = h;
    return nullptr;
}

// load() and make the handle, once (mu held): false (said once) when either fails
bool ready()
{
    if (handle || load_failed)
        return handle != nullptr;
    const char *why = load();
    if (why) {
        fprintf(stderr, "trident: cuda: cuDNN attention asked for (TRIDENT_CUDA_ATTENTION) but "
                        "%s: trident's own attention kernels run\n", why);
        load_failed = true;
        return false;
    }
    try {
        cudnnStatus_t s = fe::detail::create_handle(&handle);
        if (s != CUDNN_STATUS_SUCCESS) {
            fprintf(stderr, "trident: cuda: cudnnCreate failed (%s): trident's own attention "
                            "kernels run\n", fe::detail::get_error_string(s));
            load_failed = true;
            return false;
        }
    } catch (const std::exception &e) {
        fprintf(stderr, "trident: cuda: cuDNN did not start (%s): trident's own attention "
                        "kernels run\n", e.what());
        load_failed = true;
        return false;
    }
    fprintf(stderr, "trident: cuda: attention on cuDNN %zu (frontend %d.%d.%d)\n",
            (size_t)fe::detail::get_backend_version(), CUDNN_FRONTEND_MAJOR_VERSION,
            CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
    return true;
}

using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

// t as the view v of a tensor of this type, the variant pack's pointer found by uid
const Tensor &describe(const Tensor &t, int64_t uid, const tr_cudnn_view &v, fe::DataType_t type)
{
    t->set_uid(uid)
        .set_dim({v.dim[0], v.dim[1], v.dim[2], v.dim[3]})
        .set_stride({v.stride[0], v.stride[1], v.stride[2], v.stride[3]})
        .set_data_type(type);
    return t;
}

// an input of the graph
Tensor tensor(fe::graph::Graph &g, const char *name, int64_t uid, const tr_cudnn_view &v,
              fe::DataType_t type)
{
    return describe(g.tensor(fe::graph::Tensor_attributes().set_name(name)), uid, v, type);
}

// an output of the graph
void as_output(const Tensor &t, int64_t uid, const tr_cudnn_view &v, fe::DataType_t type)
{
    describe(t, uid, v, type)->set_output(true);
}

// The graph of one pass (TR_CUDNN_FORWARD, TR_CUDNN_BACKWARD [| TR_CUDNN_NONDETERMINISTIC])
// for (B, T, NH, HS); a null graph and the reason in `why` if cuDNN refuses it at any stage.
// With `device` (and its SM version sm) instead of the handle: built without a GPU, up to
// cuDNN's support check (tr_cudnn_attention_check).
std::shared_ptr<fe::graph::Graph> build(int pass, int B, int T, int NH, int HS,
                                        std::string &why,
                                        std::shared_ptr<fe::DeviceProperties> device = nullptr,
                                        int sm = 0)
{
    const bool forward = pass & TR_CUDNN_FORWARD;
    const bool deterministic = !(pass & TR_CUDNN_NONDETERMINISTIC);
    tr_cudnn_sdpa_layout l = tr_cudnn_sdpa_layout_of(B, T, NH, HS);
    auto g = std::make_shared<fe::graph::Graph>();
    if (device)
        g->set_device_properties(device).set_sm_version(sm);
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const auto bf16 = fe::DataType_t::BFLOAT16, f32 = fe::DataType_t::FLOAT;
    auto q = tensor(*g, "Q", Q, l.q, bf16), k = tensor(*g, "K", K, l.k, bf16);
    auto v = tensor(*g, "V", V, l.v, bf16);
    float scale = 1.0f / sqrtf((float)HS);
    if (forward) {
        auto opt = fe::graph::SDPA_attributes()
                       .set_name("trident_attention_forward")
                       .set_generate_stats(true)
                       .set_causal_mask(true)
                       .set_attn_scale(scale);
        auto [o, stats] = g->sdpa(q, k, v, opt);
        as_output(o, O, l.o, bf16);
        as_output(stats, STATS, l.stats, f32);
    } else {
        auto o = tensor(*g, "O", O, l.o, bf16), dout = tensor(*g, "dO", DO, l.o, bf16);
        auto stats = tensor(*g, "stats", STATS, l.stats, f32);
        auto opt = fe::graph::SDPA_backward_attributes()
                       .set_name("trident_attention_backward")
                       .set_causal_mask(true)
                       .set_attn_scale(scale)
                       .set_deterministic_algorithm(deterministic);
        auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opt);
        as_output(dq, DQ, l.q, bf16);
        as_output(dk, DK, l.k, bf16);
        as_output(dv, DV, l.v, bf16);
    }
    auto failed = [&](const char *stage, fe::error_t e) {
        if (e.is_good())
            return false;
        why = std::string(stage) + ": " + e.get_message();
        return true;
    };
    if (failed("validate", g->validate()) ||
        failed("build_operation_graph",
               device ? g->build_operation_graph() : g->build_operation_graph(handle)) ||
        failed("create_execution_plans",
               g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK})))
        return nullptr;
    // no engine cuDNN notes as non-deterministic unless the switch allows one: the same bits
    // run to run
    if (deterministic)
        g->deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
    if (failed("check_support", device ? g->check_support() : g->check_support(handle)) ||
        (!device && failed("build_plans", g->build_plans(handle))))
        return nullptr;
    return g;
}

// The entry for the call's shape, built on first use (mu held)
Entry &entry(int pass, int B, int T, int NH, int HS)
{
    auto key = std::make_tuple(pass, B, T, NH, HS);
    auto it = graphs.find(key);
    if (it != graphs.end())
        return it->second;
    Entry &e = graphs[key];
    const char *name = pass & TR_CUDNN_FORWARD         ? "forward"
                       : pass & TR_CUDNN_NONDETERMINISTIC ? "non-deterministic backward"
                                                          : "backward";
    std::string why;
    try {
        e.graph = build(pass, B, T, NH, HS, why);
    } catch (const std::exception &x) {
        e.graph = nullptr, why = x.what();
    }
    if (e.graph && e.graph->get_workspace_size(e.workspace).is_bad())
        e.graph = nullptr, why = "get_workspace_size failed";
    if (!e.graph)
        fprintf(stderr, "trident: cuda: cuDNN refuses the attention %s of B %d T %d NH %d HS %d "
                        "(%s): trident's own kernels run for it\n",
                name, B, T, NH, HS, why.c_str());
    else
        fprintf(stderr, "trident: cuda: cuDNN's attention %s for B %d T %d NH %d HS %d: "
                        "workspace %.1f MiB\n", name, B, T, NH, HS,
                (double)e.workspace / (1 << 20));
    return e;
}

// Run the entry's graph on st with the pointers of `pack` (mu held): false when it did not
int execute(cudaStream_t st, Entry &e, std::unordered_map<int64_t, void *> &pack,
            const char *what)
{
    if (!cu_grow_buffer(&workspace, &workspace_have, (size_t)e.workspace, 0, st, what)) {
        fprintf(stderr, "trident: cuda: no %lld bytes for cuDNN's attention workspace: "
                        "trident's own kernels run\n", (long long)e.workspace);
        e.graph = nullptr;
        return n_refused++, 0;
    }
    try {
        if (fe::detail::set_stream(handle, st) != CUDNN_STATUS_SUCCESS) {
            fprintf(stderr, "trident: cuda: cudnnSetStream failed for %s\n", what);
            return n_refused++, 0;
        }
        fe::error_t r = e.graph->execute(handle, pack, workspace);
        if (r.is_bad()) {
            fprintf(stderr, "trident: cuda: cuDNN's %s failed (%s): trident's own kernels run "
                            "for this shape\n", what, r.get_message().c_str());
            e.graph = nullptr;
            return n_refused++, 0;
        }
    } catch (const std::exception &x) {
        fprintf(stderr, "trident: cuda: cuDNN's %s threw (%s)\n", what, x.what());
        e.graph = nullptr;
        return n_refused++, 0;
    }
    cu_launched(what);
    n_ran++;
    return 1;
}

int asked(int pass)
{
    static const int passes = tr_cudnn_attention_passes(getenv("TRIDENT_CUDA_ATTENTION"));
    return passes & pass;
}

void *at(const void *base, int64_t offset) // a view's start: offset elements of bf16
{
    return const_cast<uint16_t *>(static_cast<const uint16_t *>(base)) + offset;
}

} // namespace

extern "C" {

int cu_cudnn_attention_forward(cudaStream_t st, uint16_t *out16, float *lse,
                               const uint16_t *qkv16, int B, int T, int NH, int NG, int HS,
                               int alibi, int segments)
{
    if (!asked(TR_CUDNN_FORWARD) ||
        tr_cudnn_attention_refusal(B, T, NH, NG, HS, alibi, segments,
                                   (uintptr_t)out16 | (uintptr_t)qkv16 | (uintptr_t)lse))
        return 0;
    std::lock_guard<std::mutex> hold(mu);
    Entry *e = ready() ? &entry(TR_CUDNN_FORWARD, B, T, NH, HS) : nullptr;
    if (!e || !e->graph)
        return n_refused++, 0;
    tr_cudnn_sdpa_layout l = tr_cudnn_sdpa_layout_of(B, T, NH, HS);
    std::unordered_map<int64_t, void *> pack = {
        {Q, at(qkv16, l.q.offset)}, {K, at(qkv16, l.k.offset)}, {V, at(qkv16, l.v.offset)},
        {O, out16}, {STATS, lse}};
    return execute(st, *e, pack, "attention_forward (cuDNN)");
}

int cu_cudnn_attention_backward(cudaStream_t st, uint16_t *dqkv16, const uint16_t *dout16,
                                const uint16_t *qkv16, const uint16_t *out16, const float *lse,
                                int B, int T, int NH, int NG, int HS, int alibi, int segments)
{
    uintptr_t p = (uintptr_t)dqkv16 | (uintptr_t)dout16 | (uintptr_t)qkv16 | (uintptr_t)out16;
    if (!asked(TR_CUDNN_BACKWARD) ||
        tr_cudnn_attention_refusal(B, T, NH, NG, HS, alibi, segments, p | (uintptr_t)lse))
        return 0;
    std::lock_guard<std::mutex> hold(mu);
    Entry *e = ready() ? &entry(TR_CUDNN_BACKWARD | asked(TR_CUDNN_NONDETERMINISTIC), B, T, NH,
                                HS)
                       : nullptr;
    if (!e || !e->graph)
        return n_refused++, 0;
    tr_cudnn_sdpa_layout l = tr_cudnn_sdpa_layout_of(B, T, NH, HS);
    std::unordered_map<int64_t, void *> pack = {
        {Q, at(qkv16, l.q.offset)},   {K, at(qkv16, l.k.offset)},
        {V, at(qkv16, l.v.offset)},   {O, const_cast<uint16_t *>(out16)},
        {DO, const_cast<uint16_t *>(dout16)}, {STATS, const_cast<float *>(lse)},
        {DQ, at(dqkv16, l.q.offset)}, {DK, at(dqkv16, l.k.offset)},
        {DV, at(dqkv16, l.v.offset)}};
    return execute(st, *e, pack, "attention_backward (cuDNN)");
}

const char *tr_cudnn_attention_check(const char *device_json, int sm, int pass, int B, int T,
                                     int NH, int HS)
{
    static std::string why;
    std::lock_guard<std::mutex> hold(mu);
    if (const char *e = load())
        return why = e, why.c_str();
    try {
        auto device = std::make_shared<fe::DeviceProperties>();
        std::vector<uint8_t> json(device_json, device_json + strlen(device_json));
        fe::error_t e = device->deserialize(json);
        if (e.is_bad())
            return why = "the device's properties: " + e.get_message(), why.c_str();
        why.clear();
        auto g = build(pass, B, T, NH, HS, why, device, sm);
        if (!g)
            return why.c_str();
        std::string engines, name; // the candidates, in cuDNN's order (printed: the record)
        for (int64_t i = 0; i < g->get_execution_plan_count(); i++)
            if (g->get_plan_name_at_index(i, name).is_good())
                engines += (engines.empty() ? "" : ", ") + name;
        fprintf(stderr, "trident: cuda: cuDNN's candidate engines at SM %d: %s\n", sm,
                engines.c_str());
    } catch (const std::exception &x) {
        return why = x.what(), why.c_str();
    }
    return nullptr;
}

int tr_cuda_cudnn_attention_counts(long *ran, long *refused)
{
    std::lock_guard<std::mutex> hold(mu);
    *ran = n_ran, *refused = n_refused;
    return handle ? 1 : 0;
}

} // extern "C"
