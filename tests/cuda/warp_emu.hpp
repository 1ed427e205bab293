// tests/cuda: a host emulation of the primitives of kernels/cuda/mma_prims.cuh, so the
// kernels written against them (flash_mma.cuh's tensor-core attention, xent_fused.cuh's
// cross-entropy row) run on a CPU. A block is 128 threads (or launch's threads: a multiple of
// 32, at most 256 where shared memory is tracked), each a fiber of the one host thread, run
// in turn until it waits at a barrier or ends (in order in half the blocks, in reverse in the
// others); fm_sync is a barrier of the block, a shuffle or mma a barrier of the warp around
// an exchange of the lanes' registers, and lanes all waiting at barriers the others never
// reach abort (the GPU would hang). mma.sync m16n8k16 is rebuilt from the 32 lanes'
// fragments by the PTX layouts and multiplied in fp32. Blocks run one after another. Shared
// memory starts as all-ones bytes (NaN as fp32 and bf16), so a read before a write shows; a
// shared access outside the block's bytes, a misaligned one, or a global load (16 bytes of
// fp32, 8 of bf16) outside the arrays the test declared (emu::readable) or misaligned aborts.
// ldmatrix exchanges the lanes' row addresses as a shuffle does. cp.async lands at once in
// half the blocks and only at the issuing thread's fm_cp_wait0 in the other half (the two
// ends of what the GPU may do). Races in shared memory abort, whatever the lanes' order: each
// 16-byte chunk keeps the barrier generation and warp of its last write (a copy's at its
// wait) and the warps that read it in this generation, and a read of a chunk another warp
// wrote since the last barrier, a write of one another warp read or wrote since then, or a
// read of one whose copy has not been waited for is reported (ldmatrix reads, cp.async and
// fm_st32 writes are tracked; the kernels' plain loads and stores of small arrays are not).
// For small shapes in tests (a barrier costs a fiber switch a lane).
#ifndef TR_TESTS_CUDA_WARP_EMU_HPP
#define TR_TESTS_CUDA_WARP_EMU_HPP

#include <sys/mman.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

namespace emu {

constexpr int THREADS = 128; // a block's threads unless launch is given others

inline void check(bool ok, const char *what);

// A barrier of `count` lanes (launch's fibers, below): a lane that arrives before the last
// switches to the scheduler until the last arrives; the last runs `done` (if any), releases
// the others and goes on.
struct barrier {
    explicit barrier(int n, std::function<void()> on_done = nullptr)
        : count(n), done(std::move(on_done))
    {
    }
    void arrive_and_wait();
    int count, arrived = 0;
    std::function<void()> done;
    std::vector<struct lane *> waiting;
};

struct warp {
    barrier bar{32};
    uint32_t a[32][4], b[32][2], u[32];
    float x[32];
    const uint16_t *p[32];
};


// Per 16-byte chunk of shared memory: writer = generation << 8 | 1 << 7 (a copy pending) |
// warp + 1 (0: none yet); readers = generation << 8 | the warps' bits.
struct chunk_state {
    uint64_t writer = 0, readers = 0;
};

struct block {
    uint64_t gen = 1;
    uint64_t stored_gen = 0; // the generation of the block's latest fm_stcg2
    explicit block(int threads)
        : bar(threads, [this] { gen++; }), w(new warp[threads / 32])
    {
    }
    barrier bar; // fm_sync's: its completion advances the block's generation
    std::unique_ptr<warp[]> w;
    unsigned char *smem = nullptr;
    size_t smem_bytes = 0;
    int bx = 0, by = 0, gx = 0;
    std::unique_ptr<chunk_state[]> chunks;
};
// The running lane's state (launch switches it with the lane)
inline block *cur;
inline int tid;
inline uint64_t waited_gen; // the generation of the lane's latest fm_warp_wait

// cp.async copies not landed yet (the deferred blocks'): 16 bytes each, and whether a
// commit has closed their group (wait_group waits for committed groups only)
struct pending_copy {
    void *dst;
    unsigned char bytes[16];
    bool committed;
};
inline std::vector<pending_copy> pending;
inline bool deferred_copies() { return ((cur->bx + cur->by) & 1) == 0; }

// The global memory the kernels may read with fm_ldg4 (the test's input arrays): a read
// outside all of them aborts, as a shared access outside the block's shared memory does.
struct range {
    const void *p;
    size_t bytes;
};
inline std::vector<range> readable;

inline void check(bool ok, const char *what)
{
    if (!ok) {
        std::fprintf(stderr, "warp_emu: %s\n", what);
        std::abort();
    }
}

inline void check_shared(const void *p, size_t n)
{
    const unsigned char *c = static_cast<const unsigned char *>(p);
    check(c >= cur->smem && c + n <= cur->smem + cur->smem_bytes, "shared access out of range");
    check(((uintptr_t)p & (n - 1)) == 0, "misaligned shared access");
}

inline void check_global(const void *p, size_t n)
{
    const char *c = static_cast<const char *>(p);
    bool in = false;
    for (const range &r : readable)
        in = in || (c >= static_cast<const char *>(r.p) &&
                    c + n <= static_cast<const char *>(r.p) + r.bytes);
    check(in, "global read outside the inputs");
    check(((uintptr_t)p & (n - 1)) == 0, "misaligned global load"); // (16 bytes, or 8)
}

inline warp &my_warp() { return cur->w[tid / 32]; }

inline chunk_state &chunk_of(const void *p)
{
    check(tid < 256, "shared memory tracked in blocks of 8 warps at most");
    return cur->chunks[(size_t)(static_cast<const unsigned char *>(p) - cur->smem) / 16];
}

// A read of the chunk at p by this thread's warp (see the top of the file)
inline void track_read(const void *p)
{
    chunk_state &c = chunk_of(p);
    uint64_t g = cur->gen, w = (uint64_t)(tid / 32), wr = c.writer;
    check(!(wr & 0x80), "shared read of a chunk whose cp.async has not been waited for");
    check(wr >> 8 != g || (wr & 0x7f) == w + 1 || (wr & 0x7f) == 0,
          "shared read of a chunk another warp wrote since the last barrier");
    c.readers = (c.readers >> 8 == g ? c.readers : g << 8) | 1u << w;
}

// A write of the chunk at p by this thread's warp; pending: a cp.async issued now
inline void track_write(const void *p, bool pending_copy)
{
    chunk_state &c = chunk_of(p);
    uint64_t g = cur->gen, w = (uint64_t)(tid / 32), r = c.readers;
    check(r >> 8 != g || (r & 0xff & ~(1u << w)) == 0,
          "shared write of a chunk another warp read since the last barrier");
    uint64_t wr = c.writer, ww = wr & 0x7f; // (another warp's copy in flight: a race too)
    check(ww == 0 || ww == w + 1 || (wr >> 8 != g && !(wr & 0x80)),
          "shared write of a chunk another warp wrote since the last barrier");
    c.writer = g << 8 | (pending_copy ? 0x80 : 0) | (w + 1);
}

// A copy into the chunk at p has landed (its thread's wait): a write now
inline void track_landed(const void *p)
{
    chunk_of(p).writer = cur->gen << 8 | (uint64_t)(tid / 32 + 1);
}

// A thread of the block: a fiber (ucontext) on its own stack, all of a block's in the one
// host thread, switched at barriers (a futex a barrier per host thread was most of the time)
struct lane {
    ucontext_t ctx;
    int tid = 0;
    uint64_t waited_gen = 0;
    std::vector<pending_copy> pending;
    bool blocked = false, done = false;
};
inline ucontext_t scheduler;
inline lane *running;
inline const std::function<void()> *lane_body;

inline void barrier::arrive_and_wait()
{
    if (++arrived == count) {
        arrived = 0;
        if (done)
            done();
        for (lane *l : waiting)
            l->blocked = false;
        waiting.clear();
        return;
    }
    lane *me = running;
    me->blocked = true;
    waiting.push_back(me);
    swapcontext(&me->ctx, &scheduler);
}

inline void lane_main()
{
    (*lane_body)();
    check(pending.empty(), "cp.async copies never waited for");
    running->done = true; // (uc_link: back to the scheduler)
}

// (getcontext and swapcontext return twice: kept out of launch's loops)
[[gnu::noinline]] inline void lane_start(lane &l, int t, char *stack, size_t bytes)
{
    l.tid = t, l.waited_gen = 0, l.pending.clear(), l.blocked = l.done = false;
    getcontext(&l.ctx);
    l.ctx.uc_stack.ss_sp = stack;
    l.ctx.uc_stack.ss_size = bytes;
    l.ctx.uc_link = &scheduler;
    makecontext(&l.ctx, lane_main, 0);
}

// Runs lane l until it waits at a barrier or ends (the running lane's state switched in)
[[gnu::noinline]] inline void lane_resume(lane &l)
{
    running = &l, tid = l.tid, waited_gen = l.waited_gen;
    pending.swap(l.pending);
    swapcontext(&scheduler, &l.ctx);
    l.waited_gen = waited_gen;
    pending.swap(l.pending);
}

// Runs body() as a grid of gx x gy blocks of `threads` threads with smem bytes of shared
// memory. A block's lanes run in turn, each until it waits at a barrier or ends; lanes all
// waiting with none to run (a barrier some never reach) abort instead of hanging.
template <class F> void launch(int gx, int gy, size_t smem, F body, int threads = THREADS)
{
    check(threads > 0 && threads % 32 == 0 && threads <= 1024, "a block of whole warps");
    std::vector<unsigned char> mem(smem ? smem : 1);
    const size_t page = 4096, stack_bytes = 256 * 1024; // + a guard page below each stack
    const size_t span = stack_bytes + page;
    void *stacks = mmap(nullptr, span * threads, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    check(stacks != MAP_FAILED, "no memory for the lanes' stacks");
    for (int t = 0; t < threads; t++)
        mprotect(static_cast<char *>(stacks) + span * t, page, PROT_NONE);
    std::function<void()> fn = body;
    lane_body = &fn;
    std::vector<lane> lanes(threads);
    for (int by = 0; by < gy; by++)
        for (int bx = 0; bx < gx; bx++) {
            block blk(threads);
            blk.chunks.reset(new chunk_state[mem.size() / 16 + 1]);
            std::memset(mem.data(), 0xff, mem.size());
            blk.smem = mem.data(), blk.smem_bytes = smem, blk.bx = bx, blk.by = by, blk.gx = gx;
            cur = &blk;
            for (int t = 0; t < threads; t++)
                lane_start(lanes[t], t, static_cast<char *>(stacks) + span * t + page,
                           stack_bytes);
            // lanes in order in half the blocks, in reverse in the others: a read that lacks
            // the barrier before it finds the writer's data missing one way or the other
            const bool reverse = (bx + by) & 1;
            for (int left = threads; left > 0;) {
                bool ran = false;
                for (int i = 0; i < threads; i++) {
                    lane &l = lanes[reverse ? threads - 1 - i : i];
                    if (l.done || l.blocked)
                        continue;
                    lane_resume(l);
                    ran = true;
                    left -= l.done;
                }
                check(ran || left == 0, "every lane left waits at a barrier the others never "
                                        "reach (on the GPU: a hang)");
            }
        }
    munmap(stacks, span * threads);
}

inline float bf16_to_float(uint32_t h)
{
    uint32_t u = h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

} // namespace emu

#define FM_DEV inline
#define FM_KERNEL void
#define FM_KERNEL_MIN(blocks) void
#define FM_UNROLL
#define FM_UNROLL_2
#define FM_UNROLL_4
#define FM_ROLLED
#define FM_HD

// CUDA's 16-byte vector type, which the kernels' 16-byte loads and stores move
struct alignas(16) uint4 {
    uint32_t x, y, z, w;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }

inline int fm_tid() { return emu::tid; }
inline int fm_bidx() { return emu::cur->bx; }
inline int fm_bidy() { return emu::cur->by; }
inline int fm_gridx() { return emu::cur->gx; }
inline void fm_sync() { emu::cur->bar.arrive_and_wait(); }
inline unsigned char *fm_shared() { return emu::cur->smem; }
inline int fm_min(int a, int b) { return a < b ? a : b; }
// the MUFU's ex2.approx.ftz: exact here, but with its flush of results under 2^-126 to 0
inline float fm_exp2(float x)
{
    float y = std::exp2(x);
    return y < 0x1p-126f ? 0.0f : y;
}
inline float fm_log(float x) { return std::log(x); }

inline float fm_shfl_xor(float v, int m)
{
    emu::warp &w = emu::my_warp();
    int lane = emu::tid & 31;
    w.x[lane] = v;
    w.bar.arrive_and_wait();
    float r = w.x[lane ^ m];
    w.bar.arrive_and_wait();
    return r;
}

inline uint16_t fm_bf16(float x)
{
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if (std::isnan(x))
        return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u); // round to nearest, ties to even
    return (uint16_t)(u >> 16);
}

inline uint32_t fm_pack(float lo, float hi) { return fm_bf16(lo) | (uint32_t)fm_bf16(hi) << 16; }

inline void fm_st32(uint16_t *p, uint32_t v)
{
    emu::check_shared(p, 4);
    emu::track_write(p, false);
    std::memcpy(p, &v, 4);
}

inline void fm_stg32(uint16_t *p, uint32_t v)
{
    emu::check(((uintptr_t)p & 3) == 0, "misaligned 32-bit global store");
    std::memcpy(p, &v, 4);
}

inline void fm_ldg4(const float *p, float v[4])
{
    emu::check_global(p, 16);
    std::memcpy(v, p, 16);
}

// ldmatrix .x4 (trans: .trans): lane L's r[j] from the rows whose addresses lanes 8 j ..
// 8 j + 7 gave (mma_prims.cuh states the layouts).
inline void ldsm4(uint32_t r[4], const uint16_t *p, bool trans)
{
    emu::warp &w = emu::my_warp();
    int lane = emu::tid & 31;
    emu::check_shared(p, 16);
    emu::track_read(p);
    w.p[lane] = p;
    w.bar.arrive_and_wait();
    int g = lane >> 2, t = lane & 3;
    for (int j = 0; j < 4; j++) {
        uint16_t lo, hi;
        if (trans) // rows 2t and 2t + 1 of column g
            lo = w.p[8 * j + 2 * t][g], hi = w.p[8 * j + 2 * t + 1][g];
        else // row g, columns 2t and 2t + 1
            lo = w.p[8 * j + g][2 * t], hi = w.p[8 * j + g][2 * t + 1];
        r[j] = lo | (uint32_t)hi << 16;
    }
    w.bar.arrive_and_wait();
}
inline void fm_ldsm4(uint32_t r[4], const uint16_t *p) { ldsm4(r, p, false); }
inline void fm_ldsm4_t(uint32_t r[4], const uint16_t *p) { ldsm4(r, p, true); }

inline void fm_cp16(uint16_t *dst, const uint16_t *src, bool full)
{
    emu::check_shared(dst, 16);
    emu::track_write(dst, true);
    emu::pending_copy c;
    c.dst = dst;
    c.committed = false;
    std::memset(c.bytes, 0, 16);
    emu::check_global(src, 16); // (not read when !full, but the GPU is given a real address)
    if (full)
        std::memcpy(c.bytes, src, 16);
    emu::pending.push_back(c); // (an immediate block lands it too: its commit is still due)
    if (!emu::deferred_copies())
        std::memcpy(dst, c.bytes, 16);
}
inline void fm_cp_commit()
{
    for (emu::pending_copy &c : emu::pending)
        c.committed = true;
}
// wait_group 0: the committed groups land; a copy not committed yet would still be in flight
// on the GPU, which these kernels never mean: abort
inline void fm_cp_wait0()
{
    for (const emu::pending_copy &c : emu::pending) {
        emu::check(c.committed, "cp.async copy not committed before the wait");
        if (emu::deferred_copies())
            std::memcpy(c.dst, c.bytes, 16);
        emu::track_landed(c.dst);
    }
    emu::pending.clear();
}

// The fp32 global scratch other blocks write (the fused backward's dQ sums): declared
// readable by the test's launcher, 8 bytes aligned. Blocks run one after another here, so
// the sums are always complete when read: the order the device needs is checked instead. A
// load of the sums needs a wait with no block barrier since (the device's acquire, then the
// loads), and fm_post a block barrier after the block's last store of them (the device's
// release covers the block's stores through it).
inline void fm_ldcg2(const float *p, float v[2])
{
    emu::check_global(p, 8);
    emu::check(emu::waited_gen == emu::cur->gen,
               "sums loaded with no wait for the turn before them (since the last barrier)");
    std::memcpy(v, p, 8);
}
inline void fm_stcg2(float *p, float x, float y)
{
    emu::check_global(p, 8);
    emu::cur->stored_gen = emu::cur->gen;
    p[0] = x, p[1] = y;
}
// Blocks run one after another here, each to its end, in the order of their tickets: a flag
// that is not yet what a warp waits for would never be (on the GPU: a block waiting on one
// that started after it), so the wait aborts instead.
inline int fm_ticket(int *p, int n)
{
    int t = (*p)++;
    if (t == n - 1)
        *p = 0;
    return t;
}
inline void fm_warp_wait(const int *p, int want)
{
    emu::check(*p == want,
               "a warp waits for a flag no block before it set (on the GPU: forever)");
    emu::my_warp().bar.arrive_and_wait();
    emu::waited_gen = emu::cur->gen;
}
inline void fm_post(int *p, int v)
{
    emu::check(emu::cur->stored_gen < emu::cur->gen,
               "a turn posted with no block barrier after the block's stores of the sums");
    *p = v;
}

// c += A B by the fragment layouts of mma.sync.m16n8k16.row.col (mma_prims.cuh).
inline void fm_mma(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    emu::warp &w = emu::my_warp();
    int lane = emu::tid & 31;
    std::memcpy(w.a[lane], a, sizeof w.a[lane]);
    std::memcpy(w.b[lane], b, sizeof w.b[lane]);
    w.bar.arrive_and_wait();
    float A[16][16], B[16][8];
    for (int L = 0; L < 32; L++) {
        int g = L >> 2, t = L & 3;
        for (int e = 0; e < 2; e++) {
            int sh = 16 * e;
            A[g][2 * t + e] = emu::bf16_to_float(w.a[L][0] >> sh & 0xffff);
            A[g + 8][2 * t + e] = emu::bf16_to_float(w.a[L][1] >> sh & 0xffff);
            A[g][8 + 2 * t + e] = emu::bf16_to_float(w.a[L][2] >> sh & 0xffff);
            A[g + 8][8 + 2 * t + e] = emu::bf16_to_float(w.a[L][3] >> sh & 0xffff);
            B[2 * t + e][g] = emu::bf16_to_float(w.b[L][0] >> sh & 0xffff);
            B[8 + 2 * t + e][g] = emu::bf16_to_float(w.b[L][1] >> sh & 0xffff);
        }
    }
    w.bar.arrive_and_wait(); // every lane has read the exchange before it is reused
    int g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; e++) {
        int r = g + (e >> 1) * 8, col = 2 * t + (e & 1);
        float s = 0.0f;
        for (int k = 0; k < 16; k++)
            s += A[r][k] * B[k][col];
        c[e] += s;
    }
}

#endif
