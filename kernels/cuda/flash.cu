// Fused causal attention on the GPU (kernels.h's attention_* and attention_gqa_*: the
// flash-attention scheme, no T x T tensor): one thread block per (batch, head, query tile)
// in forward, the online softmax over the key tiles at or left of the diagonal (tiles above
// it skipped, and with packed sequences the tiles wholly before the tile's first segment),
// writing out and the log-sum-exp of each query row. Backward recomputes the probabilities
// tile by tile, P = exp(S - lse), without atomics: a block per (batch, group, key tile)
// writes dK and dV of its rows (over the group's R heads and the query tiles in order), a
// block per (batch, head, query tile) writes dQ; a first kernel makes D = rowsum(dO * O)
// and each row's segment start. Deterministic run to run.
// Precision: the tensors are fp32 in memory. Tin = float: every product in fp32 FMA (the
// fp32 mode, within 1e-4 of the CPU); Tin = bf16: tiles are rounded to bf16 when loaded into
// shared memory and the tile products run on the tensor cores (wmma 16x16x16, fp32
// accumulation; sm_80 and sm_90), the softmax statistics and accumulators stay fp32.
// In bf16 mode the head sizes 16, 32, 64 and 128 run flash_mma.cu's kernels instead (the
// products in registers on mma.sync; TRIDENT_CUDA_ATTENTION=wmma keeps these); fa_prepare
// below makes their backward's row sums and segment starts too. O: the output's storage, fp32
// or (bf16 mode, kernels.h's attention_*16) bf16 bits, written by forward, read by fa_prepare;
// Q: qkv's and dqkv's, fp32 or (kernels.h's attention_*_qkv16, with O bf16) bf16 bits.
// kernels.h's attention_*_qkv16 go to cuDNN's attention first where TRIDENT_CUDA_ATTENTION asks
// for it and it takes the call (attention_cudnn.h).
// Hooks: ALiBi slopes (score += slope_h (j - i)) and grouped key/value heads (qkv layout
// (B, T, NG, R+2, HS)), as the CPU twin kernels/cpu/attention.c. Attention dropout (kernels.h's
// attention_gqa_dropout_*, fp32 storage): the kernels' DROP variants (fa_drop_args) multiply
// each probability by dropout's factor (dropout.cuh, core/philox.h's decision) where it enters
// P V and P^T dO, dS = P (z dP - D); in bf16 mode flash_mma.cu's DROP variants where they take
// the call (head sizes 16, 32, 64, 128), these elsewhere. Never cuDNN's.
// Shared memory: tiles of TILE x DP (DP = HS rounded up to 16, zero padded; rows past T
// zero; fp32 input tiles have row stride DP + 1 so the column reads of Q K^T do not hit one
// bank), opt-in dynamic memory; TILE (64, 32 or 16) is the largest whose backward key kernel
// fits FA_SMEM_CAP bytes. Head sizes up to 256. The tiles' building blocks: flash_tiles.cuh.
#include <type_traits>

#include "kernels/cuda/flash_tiles.cuh"
#include "kernels/cuda/grid.cuh"

#include <cuda_bf16.h>
#include <math.h>

namespace {

// ---------------------------------------------------------------- forward
// Dropout's factor (scale or 0) of (batch b, head h, query t, key j)
__device__ __forceinline__ float dropped(const fa_drop_args &a, int b, int h, int t, int j)
{
    drop::head_at x = drop::at(a.dr, b, h, a.T);
    return drop::factor(a.dr, x.sample, drop::element(x, t, j, a.T));
}

// DROP: kernels.h's attention_gqa_dropout_forward: P V with P times dropout's factors (the
// row sums l of the undropped P)
template <typename Tin, int TILE, typename O, typename Q, bool DROP = false>
__global__ void __launch_bounds__(FA_THREADS) fa_forward(fa_args_t<DROP> a, int DP)
{
    extern __shared__ __align__(128) unsigned char smem[];
    carver cv{smem};
    const int LT = tile_ld<Tin>(DP);
    Tin *Qs = cv.take<Tin>((size_t)TILE * LT), *Ks = cv.take<Tin>((size_t)TILE * LT);
    Tin *Vs = cv.take<Tin>((size_t)TILE * LT);
    float *S = cv.take<float>((size_t)TILE * TILE);
    Tin *Ps = cv.take<Tin>((size_t)TILE * TILE);
    float *Os = cv.take<float>((size_t)TILE * DP);
    float *m = cv.take<float>(TILE), *l = cv.take<float>(TILE), *corr = cv.take<float>(TILE);
    int *s0 = cv.take<int>(TILE);

    int qt = gridDim.x - 1 - blockIdx.x; // the largest query tiles first
    int bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH, g = h / a.R, T = a.T;
    int r0 = qt * TILE, rows = min(TILE, T - r0);
    const Q *base = qkv_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3;
    load_tile<Tin, TILE>(Qs, base + q_off(a, h), a.C3, r0, rows, a.HS, DP);
    for (int idx = threadIdx.x; idx < TILE * DP; idx += FA_THREADS)
        Os[idx] = 0.0f;
    for (int i = threadIdx.x; i < TILE; i += FA_THREADS) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        int t = r0 + min(i, rows - 1), s = 0;
        if (a.seg) { // the first key of t's run
            const int32_t *sg = a.seg + (size_t)b * T;
            for (s = t; s > 0 && sg[s - 1] == sg[t];)
                s--;
        }
        s0[i] = s;
    }
    __syncthreads();
    for (int c = s0[0] / TILE; c <= qt; c++) {
        int c0 = c * TILE, cols = min(TILE, T - c0);
        load_tile<Tin, TILE>(Ks, base + k_off(a, g), a.C3, c0, cols, a.HS, DP);
        load_tile<Tin, TILE>(Vs, base + k_off(a, g) + a.HS, a.C3, c0, cols, a.HS, DP);
        __syncthreads();
        block_mm<false, true>(S, TILE, Qs, LT, Ks, LT, TILE, TILE, DP, 1.0f, false);
        __syncthreads();
        // one warp per row: mask, running max and sum, probabilities
        for (int i = threadIdx.x / 32; i < TILE; i += FA_WARPS) {
            int lane = threadIdx.x % 32, t = r0 + i;
            float mx = -INFINITY;
            for (int j = lane; j < TILE; j += 32) {
                float s = masked_score(a, S[i * TILE + j], h, t, c0 + j, s0[i], i < rows && j < cols);
                S[i * TILE + j] = s;
                mx = fmaxf(mx, s);
            }
            mx = tr_cu_warp_max(mx);
            float mnew = fmaxf(m[i], mx), sum = 0.0f;
            for (int j = lane; j < TILE; j += 32) {
                float p = mnew == -INFINITY ? 0.0f : __expf(S[i * TILE + j] - mnew);
                if constexpr (DROP)
                    Ps[i * TILE + j] = to_in<Tin>(p * dropped(a, b, h, t, c0 + j));
                else
                    Ps[i * TILE + j] = to_in<Tin>(p);
                sum += p;
            }
            sum = tr_cu_warp_sum(sum);
            __syncwarp();
            if (lane == 0) {
                float f = mnew == -INFINITY ? 1.0f : __expf(m[i] - mnew);
                corr[i] = f;
                l[i] = l[i] * f + sum;
                m[i] = mnew;
            }
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < TILE * DP; idx += FA_THREADS)
            Os[idx] *= corr[idx / DP];
        __syncthreads();
        block_mm<false, false>(Os, DP, Ps, TILE, Vs, LT, TILE, DP, TILE, 1.0f, true);
        __syncthreads();
    }
    O *o = reinterpret_cast<O *>(sizeof(O) == 2 ? (void *)a.out16 : (void *)a.out);
    o += (size_t)b * T * a.C + (size_t)h * a.HS;
    for (int idx = threadIdx.x; idx < rows * a.HS; idx += FA_THREADS) {
        int i = idx / a.HS, d = idx % a.HS;
        put(o + (size_t)(r0 + i) * a.C + d, Os[i * DP + d] / l[i]);
    }
    for (int i = threadIdx.x; i < rows; i += FA_THREADS)
        a.lse[(size_t)bh * T + r0 + i] = m[i] + logf(l[i]);
}

// ---------------------------------------------------------------- backward
// D[bh, t] = dO . O (one warp per row), and each row's segment start (h == 0's warps); O: the
// output's storage, Q: dO's (qkv's)
template <typename O, typename Q> __global__ void fa_prepare(fa_args a)
{
    int r = blockIdx.x * FA_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= a.B * a.NH * a.T)
        return;
    int t = r % a.T, bh = r / a.T, b = bh / a.NH, h = bh % a.NH;
    size_t at = ((size_t)b * a.T + t) * a.C + (size_t)h * a.HS;
    const O *o = reinterpret_cast<const O *>(sizeof(O) == 2 ? (const void *)a.out16_c
                                                            : (const void *)a.out_c);
    const Q *dout = dout_of(a, (const Q *)nullptr);
    float s = 0.0f;
    for (int d = lane; d < a.HS; d += 32)
        s += get(dout + at + d) * get(o + at + d);
    s = tr_cu_warp_sum(s);
    if (lane == 0) {
        a.D[r] = s;
        if (h == 0) {
            int st = 0;
            if (a.seg) {
                const int32_t *sg = a.seg + (size_t)b * a.T;
                for (st = t; st > 0 && sg[st - 1] == sg[t];)
                    st--;
            }
            seg_starts(a)[(size_t)b * a.T + t] = st;
        }
    }
}

// P and dS of one tile pair into S/Ps and dP/dSs (S, dP hold Q K^T and dO V^T on entry).
// DROP (a of batch b): Ps = P times dropout's factor z, dS = P (z dP - D).
template <typename Tin, int TILE, bool DROP = false>
__device__ void tile_grads(const fa_args_t<DROP> &a, float *S, float *dP, Tin *Ps, Tin *dSs,
                           const float *lse_s, const float *D_s, const int *s0, int h, int r0,
                           int rows, int c0, int cols, int b = 0)
{
    for (int idx = threadIdx.x; idx < TILE * TILE; idx += FA_THREADS) {
        int i = idx / TILE, j = idx % TILE;
        float s = masked_score(a, S[idx], h, r0 + i, c0 + j, s0[i], i < rows && j < cols);
        float p = s == -INFINITY ? 0.0f : __expf(s - lse_s[i]);
        if constexpr (DROP) {
            float z = dropped(a, b, h, r0 + i, c0 + j);
            Ps[idx] = to_in<Tin>(p * z);
            dSs[idx] = to_in<Tin>(p * (z * dP[idx] - D_s[i]));
        } else {
            Ps[idx] = to_in<Tin>(p);
            dSs[idx] = to_in<Tin>(p * (dP[idx] - D_s[i]));
        }
    }
}

// dK, dV of key tile blockIdx.x of (batch, group) blockIdx.y.
template <typename Tin, int TILE, typename Q, bool DROP = false>
__global__ void __launch_bounds__(FA_THREADS) fa_backward_kv(fa_args_t<DROP> a, int DP)
{
    extern __shared__ __align__(128) unsigned char smem[];
    carver cv{smem};
    const int LT = tile_ld<Tin>(DP);
    Tin *Ks = cv.take<Tin>((size_t)TILE * LT), *Vs = cv.take<Tin>((size_t)TILE * LT);
    Tin *Qs = cv.take<Tin>((size_t)TILE * LT), *dOs = cv.take<Tin>((size_t)TILE * LT);
    float *S = cv.take<float>((size_t)TILE * TILE), *dP = cv.take<float>((size_t)TILE * TILE);
    Tin *Ps = cv.take<Tin>((size_t)TILE * TILE), *dSs = cv.take<Tin>((size_t)TILE * TILE);
    float *dK = cv.take<float>((size_t)TILE * DP), *dV = cv.take<float>((size_t)TILE * DP);
    float *lse_s = cv.take<float>(TILE), *D_s = cv.take<float>(TILE);
    int *s0 = cv.take<int>(TILE);

    int c = blockIdx.x, bg = blockIdx.y, b = bg / a.NG, g = bg % a.NG, T = a.T;
    int tiles = (T + TILE - 1) / TILE, c0 = c * TILE, cols = min(TILE, T - c0);
    const Q *base = qkv_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3;
    const int *starts = seg_starts(a) + (size_t)b * T;
    load_tile<Tin, TILE>(Ks, base + k_off(a, g), a.C3, c0, cols, a.HS, DP);
    load_tile<Tin, TILE>(Vs, base + k_off(a, g) + a.HS, a.C3, c0, cols, a.HS, DP);
    for (int idx = threadIdx.x; idx < TILE * DP; idx += FA_THREADS)
        dK[idx] = dV[idx] = 0.0f;
    for (int i = 0; i < a.R; i++) {
        int h = g * a.R + i, bh = b * a.NH + h;
        const Q *dO = dout_of(a, (const Q *)nullptr) + (size_t)b * T * a.C + (size_t)h * a.HS;
        for (int qt = c; qt < tiles; qt++) {
            int r0 = qt * TILE, rows = min(TILE, T - r0);
            if (starts[r0] >= c0 + cols)
                continue; // the key tile lies wholly before these queries' runs (uniform)
            __syncthreads(); // the previous pair's readers of Qs, dOs, Ps, dSs are done
            load_tile<Tin, TILE>(Qs, base + q_off(a, h), a.C3, r0, rows, a.HS, DP);
            load_tile<Tin, TILE>(dOs, dO, a.C, r0, rows, a.HS, DP);
            for (int r = threadIdx.x; r < TILE; r += FA_THREADS) {
                int t = r0 + min(r, rows - 1);
                lse_s[r] = a.lse_c[(size_t)bh * T + t];
                D_s[r] = a.D[(size_t)bh * T + t];
                s0[r] = starts[t];
            }
            __syncthreads();
            block_mm<false, true>(S, TILE, Qs, LT, Ks, LT, TILE, TILE, DP, 1.0f, false);
            block_mm<false, true>(dP, TILE, dOs, LT, Vs, LT, TILE, TILE, DP, 1.0f, false);
            __syncthreads();
            tile_grads<Tin, TILE, DROP>(a, S, dP, Ps, dSs, lse_s, D_s, s0, h, r0, rows, c0, cols,
                                        b);
            __syncthreads();
            // dV += P^T dO, dK += scale dS^T Q
            block_mm<true, false>(dV, DP, Ps, TILE, dOs, LT, TILE, DP, TILE, 1.0f, true);
            block_mm<true, false>(dK, DP, dSs, TILE, Qs, LT, TILE, DP, TILE, a.scale, true);
        }
    }
    __syncthreads();
    Q *dk = dqkv_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3 + k_off(a, g);
    for (int idx = threadIdx.x; idx < cols * a.HS; idx += FA_THREADS) {
        int j = idx / a.HS, d = idx % a.HS;
        dk[(size_t)(c0 + j) * a.C3 + d] = stored<Q>(dK[j * DP + d]);
        dk[(size_t)(c0 + j) * a.C3 + a.HS + d] = stored<Q>(dV[j * DP + d]);
    }
}

// dQ of query tile (from the last) blockIdx.x of (batch, head) blockIdx.y.
template <typename Tin, int TILE, typename Q, bool DROP = false>
__global__ void __launch_bounds__(FA_THREADS) fa_backward_q(fa_args_t<DROP> a, int DP)
{
    extern __shared__ __align__(128) unsigned char smem[];
    carver cv{smem};
    const int LT = tile_ld<Tin>(DP);
    Tin *Qs = cv.take<Tin>((size_t)TILE * LT), *dOs = cv.take<Tin>((size_t)TILE * LT);
    Tin *Ks = cv.take<Tin>((size_t)TILE * LT), *Vs = cv.take<Tin>((size_t)TILE * LT);
    float *S = cv.take<float>((size_t)TILE * TILE), *dP = cv.take<float>((size_t)TILE * TILE);
    Tin *dSs = cv.take<Tin>((size_t)TILE * TILE);
    float *dQ = cv.take<float>((size_t)TILE * DP);
    float *lse_s = cv.take<float>(TILE), *D_s = cv.take<float>(TILE);
    int *s0 = cv.take<int>(TILE);

    int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    int g = h / a.R, T = a.T, r0 = qt * TILE, rows = min(TILE, T - r0);
    const Q *base = qkv_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3;
    const int *starts = seg_starts(a) + (size_t)b * T;
    load_tile<Tin, TILE>(Qs, base + q_off(a, h), a.C3, r0, rows, a.HS, DP);
    load_tile<Tin, TILE>(dOs, dout_of(a, (const Q *)nullptr) + (size_t)b * T * a.C +
                                  (size_t)h * a.HS,
                         a.C, r0, rows, a.HS, DP);
    for (int idx = threadIdx.x; idx < TILE * DP; idx += FA_THREADS)
        dQ[idx] = 0.0f;
    for (int r = threadIdx.x; r < TILE; r += FA_THREADS) {
        int t = r0 + min(r, rows - 1);
        lse_s[r] = a.lse_c[(size_t)bh * T + t];
        D_s[r] = a.D[(size_t)bh * T + t];
        s0[r] = starts[t];
    }
    __syncthreads();
    for (int c = s0[0] / TILE; c <= qt; c++) {
        int c0 = c * TILE, cols = min(TILE, T - c0);
        load_tile<Tin, TILE>(Ks, base + k_off(a, g), a.C3, c0, cols, a.HS, DP);
        load_tile<Tin, TILE>(Vs, base + k_off(a, g) + a.HS, a.C3, c0, cols, a.HS, DP);
        __syncthreads();
        block_mm<false, true>(S, TILE, Qs, LT, Ks, LT, TILE, TILE, DP, 1.0f, false);
        block_mm<false, true>(dP, TILE, dOs, LT, Vs, LT, TILE, TILE, DP, 1.0f, false);
        __syncthreads();
        // (P itself is not needed here: tile_grads writes it to dSs first, then dS over it)
        tile_grads<Tin, TILE, DROP>(a, S, dP, dSs, dSs, lse_s, D_s, s0, h, r0, rows, c0, cols, b);
        __syncthreads();
        block_mm<false, false>(dQ, DP, dSs, TILE, Ks, LT, TILE, DP, TILE, a.scale, true);
        __syncthreads();
    }
    Q *dq = dqkv_of(a, (const Q *)nullptr) + (size_t)b * T * a.C3 + q_off(a, h);
    for (int idx = threadIdx.x; idx < rows * a.HS; idx += FA_THREADS) {
        int i = idx / a.HS, d = idx % a.HS;
        dq[(size_t)(r0 + i) * a.C3 + d] = stored<Q>(dQ[i * DP + d]);
    }
}

// ---------------------------------------------------------------- launchers
int pad16(int HS) { return (HS + 15) / 16 * 16; }

// The tile: the largest whose backward key kernel fits the cap.
template <typename Tin> int tile_for(int DP)
{
    for (int t = 64; t > 16; t /= 2)
        if (dkv_smem(t, DP, sizeof(Tin)) <= FA_SMEM_CAP)
            return t;
    return 16;
}

template <typename K> bool prepare_launch(K kernel, size_t bytes, const char *what)
{
    return !cu_note(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)bytes),
                    what);
}

fa_args make_args(int B, int T, int NH, int NG, int HS, const float *alibi,
                  const int32_t *segments)
{
    fa_args a = {};
    a.B = B, a.T = T, a.NH = NH, a.NG = NG, a.R = NH / NG, a.HS = HS, a.C = NH * HS;
    a.C3 = NG * (a.R + 2) * HS;
    a.scale = 1.0f / sqrtf((float)HS);
    a.alibi = alibi;
    a.seg = segments;
    return a;
}

bool usable(const fa_args &a, const char *what)
{
    if (a.HS > FA_MAX_HS) {
        cu_note(cudaErrorInvalidValue, what); // head sizes above 256 are not built
        return false;
    }
    if ((long long)a.B * a.NH > 65535) { // grid.y: batch x heads
        cu_note(cudaErrorInvalidConfiguration, what);
        return false;
    }
    return a.B > 0 && a.T > 0 && a.NH > 0;
}

template <typename Tin, int TILE, typename O, typename Q, bool DROP>
void forward_tiles(cudaStream_t st, const fa_args_t<DROP> &a, int DP)
{
    size_t bytes = fwd_smem(TILE, DP, sizeof(Tin));
    if (!prepare_launch(fa_forward<Tin, TILE, O, Q, DROP>, bytes, "attention_forward (flash)"))
        return;
    dim3 grid((a.T + TILE - 1) / TILE, a.B * a.NH);
    fa_forward<Tin, TILE, O, Q, DROP><<<grid, FA_THREADS, bytes, st>>>(a, DP);
    cu_launched("attention_forward (flash)");
}

// the dropout's arguments of a (null without dropout), for flash_mma.cu
const tr_dropout *drop_of(const fa_args &, tr_dropout *) { return nullptr; }
const tr_dropout *drop_of(const fa_drop_args &a, tr_dropout *d)
{
    d->seed = a.dr.seed, d->first_sample = a.dr.sample0, d->site = a.dr.site;
    d->threshold = a.dr.threshold, d->scale = a.dr.scale, d->head0 = a.dr.head0;
    return d;
}

// qkv and dqkv (fp32) or qkv16 and dqkv16 (bf16) for the mma kernels, as Q says
template <typename Q> const float *f32_in(const fa_args &a) { return sizeof(Q) == 4 ? a.qkv : 0; }
template <typename Q> const uint16_t *b16_in(const fa_args &a)
{
    return sizeof(Q) == 2 ? a.qkv16 : nullptr;
}
template <typename Q> const float *f32_dout(const fa_args &a)
{
    return sizeof(Q) == 4 ? a.dout : nullptr;
}
template <typename Q> const uint16_t *b16_dout(const fa_args &a)
{
    return sizeof(Q) == 2 ? a.dout16 : nullptr;
}
template <typename Q> float *f32_grad(const fa_args &a) { return sizeof(Q) == 4 ? a.dqkv : 0; }
template <typename Q> uint16_t *b16_grad(const fa_args &a)
{
    return sizeof(Q) == 2 ? a.dqkv16 : nullptr;
}

template <typename Tin, typename O = float, typename Q = float, bool DROP = false>
void forward(tr_stream s, const fa_args_t<DROP> &a)
{
    if (!usable(a, "attention_forward (flash)"))
        return;
    cudaStream_t st = cu_stream(s);
    bool o16 = sizeof(O) == 2;
    tr_dropout d;
    if (std::is_same<Tin, __nv_bfloat16>::value &&
        cu_flash_mma_forward(st, o16 ? nullptr : a.out, o16 ? a.out16 : nullptr, a.lse,
                             f32_in<Q>(a), b16_in<Q>(a), a.alibi, a.B, a.T, a.NH, a.NG, a.HS,
                             a.seg, drop_of(a, &d)))
        return;
    int DP = pad16(a.HS), tile = tile_for<Tin>(DP);
    if (tile == 64)
        forward_tiles<Tin, 64, O, Q, DROP>(st, a, DP);
    else if (tile == 32)
        forward_tiles<Tin, 32, O, Q, DROP>(st, a, DP);
    else
        forward_tiles<Tin, 16, O, Q, DROP>(st, a, DP);
}

template <typename Tin, int TILE, typename Q, bool DROP>
void backward_tiles(cudaStream_t st, const fa_args_t<DROP> &a, int DP)
{
    size_t kv = dkv_smem(TILE, DP, sizeof(Tin)), q = dq_smem(TILE, DP, sizeof(Tin));
    if (!prepare_launch(fa_backward_kv<Tin, TILE, Q, DROP>, kv,
                        "attention_backward (flash, dK dV)") ||
        !prepare_launch(fa_backward_q<Tin, TILE, Q, DROP>, q, "attention_backward (flash, dQ)"))
        return;
    int tiles = (a.T + TILE - 1) / TILE;
    fa_backward_kv<Tin, TILE, Q, DROP><<<dim3(tiles, a.B * a.NG), FA_THREADS, kv, st>>>(a, DP);
    cu_launched("attention_backward (flash, dK dV)");
    fa_backward_q<Tin, TILE, Q, DROP><<<dim3(tiles, a.B * a.NH), FA_THREADS, q, st>>>(a, DP);
    cu_launched("attention_backward (flash, dQ)");
}

template <typename Tin, typename O = float, typename Q = float, bool DROP = false>
void backward(tr_stream s, const fa_args_t<DROP> &a)
{
    if (!usable(a, "attention_backward (flash)"))
        return;
    cudaStream_t st = cu_stream(s);
    int rows = a.B * a.NH * a.T;
    fa_prepare<O, Q><<<(rows + FA_WARPS - 1) / FA_WARPS, FA_THREADS, 0, st>>>(
        static_cast<const fa_args &>(a));
    cu_launched("attention_backward (flash, row sums)");
    const int32_t *starts = reinterpret_cast<const int32_t *>(a.D + (size_t)a.B * a.NH * a.T);
    tr_dropout d;
    if (std::is_same<Tin, __nv_bfloat16>::value &&
        cu_flash_mma_backward(st, f32_grad<Q>(a), b16_grad<Q>(a), a.D, starts, f32_dout<Q>(a),
                              b16_dout<Q>(a), f32_in<Q>(a), b16_in<Q>(a), a.lse_c, a.alibi, a.B,
                              a.T, a.NH, a.NG, a.HS, drop_of(a, &d)))
        return;
    int DP = pad16(a.HS), tile = tile_for<Tin>(DP);
    if (tile == 64)
        backward_tiles<Tin, 64, Q, DROP>(st, a, DP);
    else if (tile == 32)
        backward_tiles<Tin, 32, Q, DROP>(st, a, DP);
    else
        backward_tiles<Tin, 16, Q, DROP>(st, a, DP);
}

} // namespace

extern "C" {

void cu_flash_forward_fp32(tr_stream s, float *out, float *lse, const float *qkv,
                           const float *alibi, int B, int T, int NH, int NG, int HS,
                           const int32_t *segments)
{
    fa_args a = make_args(B, T, NH, NG, HS, alibi, segments);
    a.out = out, a.lse = lse, a.qkv = qkv;
    forward<float>(s, a);
}

void cu_flash_forward_bf16(tr_stream s, float *out, uint16_t *out16, float *lse,
                           const float *qkv, const float *alibi, int B, int T, int NH, int NG,
                           int HS, const int32_t *segments)
{
    fa_args a = make_args(B, T, NH, NG, HS, alibi, segments);
    a.out = out, a.lse = lse, a.qkv = qkv;
    if (out16)
        a.out16 = out16;
    out16 ? forward<__nv_bfloat16, uint16_t>(s, a) : forward<__nv_bfloat16>(s, a);
}

void cu_flash_backward_fp32(tr_stream s, float *dqkv, float *scratch, const float *dout,
                            const float *qkv, const float *out, const float *lse,
                            const float *alibi, int B, int T, int NH, int NG, int HS,
                            const int32_t *segments)
{
    fa_args a = make_args(B, T, NH, NG, HS, alibi, segments);
    a.dqkv = dqkv, a.D = scratch, a.dout = dout, a.qkv = qkv, a.out_c = out, a.lse_c = lse;
    backward<float>(s, a);
}

void cu_flash_backward_bf16(tr_stream s, float *dqkv, float *scratch, const float *dout,
                            const float *qkv, const float *out, const uint16_t *out16,
                            const float *lse, const float *alibi, int B, int T, int NH, int NG,
                            int HS, const int32_t *segments)
{
    fa_args a = make_args(B, T, NH, NG, HS, alibi, segments);
    a.dqkv = dqkv, a.D = scratch, a.dout = dout, a.qkv = qkv, a.out_c = out, a.lse_c = lse;
    if (out16)
        a.out16_c = out16;
    out16 ? backward<__nv_bfloat16, uint16_t>(s, a) : backward<__nv_bfloat16>(s, a);
}

void cu_flash_dropout_forward(tr_stream s, int bf16, float *out, float *lse, const float *qkv,
                              const float *alibi, int B, int T, int NH, int NG, int HS,
                              const int32_t *segments, tr_dropout d)
{
    fa_drop_args a;
    static_cast<fa_args &>(a) = make_args(B, T, NH, NG, HS, alibi, segments);
    a.out = out, a.lse = lse, a.qkv = qkv, a.dr = drop::params_of(d);
    bf16 ? forward<__nv_bfloat16, float, float, true>(s, a)
         : forward<float, float, float, true>(s, a);
}

void cu_flash_dropout_backward(tr_stream s, int bf16, float *dqkv, float *scratch,
                               const float *dout, const float *qkv, const float *out,
                               const float *lse, const float *alibi, int B, int T, int NH,
                               int NG, int HS, const int32_t *segments, tr_dropout d)
{
    fa_drop_args a;
    static_cast<fa_args &>(a) = make_args(B, T, NH, NG, HS, alibi, segments);
    a.dqkv = dqkv, a.D = scratch, a.dout = dout, a.qkv = qkv, a.out_c = out, a.lse_c = lse;
    a.dr = drop::params_of(d);
    bf16 ? backward<__nv_bfloat16, float, float, true>(s, a)
         : backward<float, float, float, true>(s, a);
}

void cu_attention_forward_qkv16(tr_stream s, uint16_t *out16, float *lse, const uint16_t *qkv16,
                                const float *alibi, int B, int T, int NH, int NG, int HS,
                                const int32_t *segments)
{
    if (cu_cudnn_attention_forward(cu_stream(s), out16, lse, qkv16, B, T, NH, NG, HS, !!alibi,
                                   !!segments))
        return;
    fa_args a = make_args(B, T, NH, NG, HS, alibi, segments);
    a.out16 = out16, a.lse = lse, a.qkv16 = qkv16;
    forward<__nv_bfloat16, uint16_t, uint16_t>(s, a);
}

void cu_attention_backward_qkv16(tr_stream s, uint16_t *dqkv16, float *scratch,
                                 const uint16_t *dout16, const uint16_t *qkv16,
                                 const uint16_t *out16, const float *lse, const float *alibi,
                                 int B, int T, int NH, int NG, int HS, const int32_t *segments)
{
    if (cu_cudnn_attention_backward(cu_stream(s), dqkv16, dout16, qkv16, out16, lse, B, T, NH,
                                    NG, HS, !!alibi, !!segments))
        return; // (no row sums: cuDNN makes its own)
    fa_args a = make_args(B, T, NH, NG, HS, alibi, segments);
    a.dqkv16 = dqkv16, a.D = scratch, a.dout16 = dout16, a.qkv16 = qkv16, a.out16_c = out16;
    a.lse_c = lse;
    backward<__nv_bfloat16, uint16_t, uint16_t>(s, a);
}

} // extern "C"
