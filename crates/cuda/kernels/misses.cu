// The card's half of a pass whose routed experts are not all on the card (docs/PLACEMENT.md, "On the
// GPU"; the host's half and the mailbox's layout are ops/misses.rs): `miss_ask` names the slots the
// card does not hold and hands the host their inputs, `miss_take` waits for the host's answer and copies
// the outputs beside the card's own. The outputs are the host's (the same bits as the card's kernels by
// the contracts); these kernels only move them.
//
// The mailbox (u32 words, mapped pinned memory): ASKED, DONE, LAYER, TOKENS, then 8·k slot ids (the
// expert, with MB_HELD set for a slot the card computes: the host counts every routing for the cache's
// ranking but computes only the others), 8·n input values, 8·k·n output values (f32 bits).
#define MB_ASKED 0
#define MB_DONE 1
#define MB_LAYER 2
#define MB_TOKENS 3
#define MB_IDS 4
#define MB_MAX_T 8
#define MB_HELD 0x80000000u

// One block: DONE cleared (the last answer has been taken: miss_take ran before, in stream order), each
// slot's expert looked up in the layer's residency table (`slot_of[e]`: its cache slot, −1 where the card
// does not hold it), the window's inputs copied, then, after a system-wide fence, ASKED set. The card's
// gathers run over the cache with `cache_ids`: a held slot's cache slot, and slot 0 for a slot the host
// computes, whose row miss_take then overwrites (so the gather kernels need no form of their own).
// Stream slots (docs/PLACEMENT.md): the first `streams` distinct experts not held, of those the card can
// read from the host's locked pages (ids lo..hi), are brought over the bus by miss_stream into the cache's
// slots held.. (stream_of[j]: slot held + j's expert, −1 for none) and computed by the card's own kernels
// like the held ones; the mailbox marks them MB_HELD, so the host counts them but leaves them to the card.
#define MB_ASSIGN (MB_MAX_T * 64)
#ifndef MISS_HOST_KEEP
#define MISS_HOST_KEEP 0
#endif
#define MB_MAX_STREAMS 64
// Guess slots (`STRATA_GUESS_SLOTS`, docs/PLACEMENT.md "Guessed experts"): slots held + streams + j hold
// expert guess_of[j] (−1 for none), brought over the bus while the layer's mixer ran (miss_guess, then
// miss_stream); a slot whose expert is there is computed from there like a held one.
// COUNTED (miss_ask_counted, `STRATA_ASK_MISSES_ONLY`): the card also counts each slot's expert in
// `counts` (the cache's ranking reads them before its re-ranks, in place of the host's counting), and it
// asks the host only where a slot is left to it: `skip[0]` says whether it did not, for miss_take. A
// request the held and streamed slots cover then costs no round trip over the bus.
template <bool COUNTED>
__device__ __forceinline__ void miss_ask_body(u32* box, int layer, int t, int k, int n, const int* __restrict__ ids,
                                              const int* __restrict__ slot_of, const float* __restrict__ x,
                                              int* __restrict__ cache_ids, int held, int streams, int lo, int hi,
                                              int* __restrict__ stream_of, const int* __restrict__ guess_of,
                                              int guesses, u32* __restrict__ counts, int* __restrict__ skip) {
    grid_dep_wait();
    // Each slot's expert, its cache slot and its stream slot (−1 for none), read once by all threads.
    __shared__ int expert[MB_ASSIGN], slot[MB_ASSIGN], assign[MB_ASSIGN], streamed[MB_MAX_STREAMS];
    volatile u32* w = box;
    for (int i = threadIdx.x; i < t * k; i += blockDim.x) {
        const int e = ids[i];
        int s = slot_of[e];
        for (int j = 0; j < guesses && s < 0; j++)
            if (guess_of[j] == e) s = held + streams + j;
        expert[i] = e;
        slot[i] = s;
        assign[i] = -1;
        if (COUNTED) atomicAdd(counts + e, 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        if (!COUNTED) {
            w[MB_DONE] = 0;
            w[MB_LAYER] = (u32)layer;
            w[MB_TOKENS] = (u32)t;
        }
        // In slot order, so a window's streams are the same at every replay: one thread, over shared
        // memory (at most 8·64 slots and 64 stream slots).
        int used = 0, cap = streams;
#if MISS_HOST_KEEP
        // The host keeps the last MISS_HOST_KEEP per mille of the request's distinct misses that could
        // stream (`STRATA_DEFINES=MISS_HOST_KEEP=…`, timing only): the bus and the host's threads then
        // split a layer's misses rather than the bus taking them all while the host waits. Which slot is
        // computed where changes no bit.
        {
            int m = 0;
            for (int i = 0; i < t * k; i++) {
                const int e = expert[i];
                if (slot[i] >= 0 || e < lo || e >= hi) continue;
                bool again = false;
                for (int j = 0; j < i && !again; j++) again = expert[j] == e;
                m += !again;
            }
            cap = min(streams, m - m * MISS_HOST_KEEP / 1000);
        }
#endif
        for (int i = 0; i < t * k && cap > 0; i++) {
            const int e = expert[i];
            if (slot[i] >= 0 || e < lo || e >= hi) continue;
            int a = -1;
            for (int j = 0; j < used && a < 0; j++)
                if (streamed[j] == e) a = j;
            if (a < 0 && used < cap) {
                streamed[used] = e;
                a = used++;
            }
            assign[i] = a;
        }
        for (int j = 0; j < streams; j++) stream_of[j] = j < used ? streamed[j] : -1;
    }
    __syncthreads();
    if (COUNTED) {
        int mine = 0;
        for (int i = threadIdx.x; i < t * k; i += blockDim.x) {
            const int s = slot[i], a = assign[i];
            cache_ids[i] = s >= 0 ? s : (a >= 0 ? held + a : 0);
            mine |= s < 0 && a < 0;
        }
        // The mailbox is left alone where the host has nothing to compute (the last answer's DONE stays).
        if (!__syncthreads_or(mine)) {
            if (threadIdx.x == 0) skip[0] = 1;
            return;
        }
        if (threadIdx.x == 0) {
            skip[0] = 0;
            w[MB_DONE] = 0;
            w[MB_LAYER] = (u32)layer;
            w[MB_TOKENS] = (u32)t;
        }
    }
    for (int i = threadIdx.x; i < t * k; i += blockDim.x) {
        const int e = expert[i], s = slot[i], a = assign[i];
        if (!COUNTED) cache_ids[i] = s >= 0 ? s : (a >= 0 ? held + a : 0);
        w[MB_IDS + i] = (s < 0 && a < 0) ? (u32)e : ((u32)e | MB_HELD);
    }
    const size_t xs = MB_IDS + (size_t)MB_MAX_T * k;
    for (int i = threadIdx.x; i < t * n; i += blockDim.x) w[xs + i] = __float_as_uint(x[i]);
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) w[MB_ASKED] = 1;
}

extern "C" __global__ void miss_ask(u32* box, int layer, int t, int k, int n, const int* __restrict__ ids,
                                    const int* __restrict__ slot_of, const float* __restrict__ x,
                                    int* __restrict__ cache_ids, int held, int streams, int lo, int hi,
                                    int* __restrict__ stream_of, const int* __restrict__ guess_of, int guesses) {
    miss_ask_body<false>(box, layer, t, k, n, ids, slot_of, x, cache_ids, held, streams, lo, hi, stream_of, guess_of,
                         guesses, nullptr, nullptr);
}

extern "C" __global__ void miss_ask_counted(u32* box, int layer, int t, int k, int n, const int* __restrict__ ids,
                                           const int* __restrict__ slot_of, const float* __restrict__ x,
                                           int* __restrict__ cache_ids, int held, int streams, int lo, int hi,
                                           int* __restrict__ stream_of, const int* __restrict__ guess_of,
                                           int guesses, u32* __restrict__ counts, int* __restrict__ skip) {
    miss_ask_body<true>(box, layer, t, k, n, ids, slot_of, x, cache_ids, held, streams, lo, hi, stream_of, guess_of,
                        guesses, counts, skip);
}

// The guess (docs/PLACEMENT.md "Guessed experts"): of the M = T·k experts the block's router picked on the
// mixer's input (`ids`, in slot order), the first `guesses` distinct ones the card does not hold and can
// read from the host's locked pages (ids lo..hi) named in guess_of[first..] (−1 for none), for
// miss_stream to bring into those guess slots while the mixer runs. One thread, in slot order (the same at every replay).
__device__ __forceinline__ void miss_guess_body(const int* __restrict__ ids, int M, const int* __restrict__ slot_of,
                                                int lo, int hi, int first, int guesses, int* __restrict__ guess_of) {
    grid_dep_wait();
    if (threadIdx.x != 0) return;
    int used = first;
    for (int i = 0; i < M && used < first + guesses; i++) {
        const int e = ids[i];
        if (slot_of[e] >= 0 || e < lo || e >= hi) continue;
        bool again = false;
        for (int j = 0; j < used && !again; j++) again = guess_of[j] == e;
        if (!again) guess_of[used++] = e;
    }
    for (int j = used; j < first + guesses; j++) guess_of[j] = -1;
}
extern "C" __global__ void miss_guess(const int* __restrict__ ids, int M, const int* __restrict__ slot_of, int lo,
                                      int hi, int guesses, int* __restrict__ guess_of) {
    miss_guess_body(ids, M, slot_of, lo, hi, 0, guesses, guess_of);
}
// The second guess (`STRATA_GUESS_MIXER_SLOTS`): entries before `first` are the early guess's, kept, and an
// expert they name is not named again.
extern "C" __global__ void miss_guess_after(const int* __restrict__ ids, int M, const int* __restrict__ slot_of,
                                            int lo, int hi, int first, int guesses, int* __restrict__ guess_of) {
    miss_guess_body(ids, M, slot_of, lo, hi, first, guesses, guess_of);
}

// The stream slots' experts brought over the bus (blockIdx.y: the stream slot, blockIdx.z: the projection,
// gate, up, down; a projection with len 0 is not copied: a fused gate/up tensor's up half): expert e's
// `len` bytes from the host's locked pages (`src + e·len`, the card's address of them) into cache slot
// held + j (`dst + (held + j)·len`). The blocks of a slot share its bytes in chunks of 36·128 (128 Q2_0
// pairs): read with 4-byte loads a warp reads 128 bytes at a time, into shared memory, then written in
// the card's layout (bit `which` of `pairs`: each two Q2_0 blocks as their two scales, then their two code runs, as
// ops/matrix.rs pair_q2_0_blocks moves them; else as they are). The bytes are the file's: the card's
// kernels compute the slot as they would the same expert held.
#define STREAM_CHUNK (36 * 128)
#ifndef MISS_STREAM_WIDE
#define MISS_STREAM_WIDE 1
#endif
extern "C" __global__ void miss_stream(const int* __restrict__ stream_of, int held, const u32* src_gate,
                                       const u32* src_up, const u32* src_down, u32* __restrict__ dst_gate,
                                       u32* __restrict__ dst_up, u32* __restrict__ dst_down, long long len_gate,
                                       long long len_up, long long len_down, int pairs) {
    grid_dep_wait();
#if MISS_STREAM_WIDE
    __shared__ __align__(16) u32 chunk[STREAM_CHUNK / 4];
#else
    __shared__ u32 chunk[STREAM_CHUNK / 4];
#endif
    const int j = blockIdx.y, which = blockIdx.z;
    const int e = stream_of[j];
    const long long len = which == 0 ? len_gate : which == 1 ? len_up : len_down;
    if (e < 0 || len == 0) return;
    const u32* from = (which == 0 ? src_gate : which == 1 ? src_up : src_down) + (size_t)e * (size_t)(len / 4);
    u32* to = (which == 0 ? dst_gate : which == 1 ? dst_up : dst_down) + (size_t)(held + j) * (size_t)(len / 4);
    const long long words = len / 4;
    for (long long c0 = (long long)blockIdx.x * (STREAM_CHUNK / 4); c0 < words; c0 += (long long)gridDim.x * (STREAM_CHUNK / 4)) {
        const int in = (int)min((long long)(STREAM_CHUNK / 4), words - c0);
#if MISS_STREAM_WIDE
        // 16-byte loads where the chunk allows them: a warp asks the bus for 512 bytes at a time, not 128
        // (the same bytes; on an H100 a placed prompt read 16 % faster in windows of 64, decode too:
        // bench/results/2026-12-07-h100-placed-windows/; `STRATA_DEFINES=MISS_STREAM_WIDE=0` for 4-byte loads).
        if (in % 4 == 0 && ((size_t)(from + c0) & 15) == 0) {
            const uint4* f4 = reinterpret_cast<const uint4*>(from + c0);
            uint4* c4 = reinterpret_cast<uint4*>(chunk);
            for (int i = threadIdx.x; i < in / 4; i += blockDim.x) c4[i] = f4[i];
        } else
#endif
        {
#pragma unroll 4
            for (int i = threadIdx.x; i < in; i += blockDim.x) chunk[i] = from[c0 + i];
        }
        __syncthreads();
        if ((pairs >> which) & 1) {
            for (int p = threadIdx.x; p < in / 9; p += blockDim.x) {
                const u32* a = chunk + 9 * p;
                u32* b = to + c0 + 9 * p;
                b[0] = (a[0] & 0xffffu) | (a[4] & 0xffff0000u);
                b[1] = (a[0] >> 16) | (a[1] << 16);
                b[2] = (a[1] >> 16) | (a[2] << 16);
                b[3] = (a[2] >> 16) | (a[3] << 16);
                b[4] = (a[3] >> 16) | (a[4] << 16);
                for (int q = 5; q < 9; q++) b[q] = a[q];
            }
        } else {
            for (int i = threadIdx.x; i < in; i += blockDim.x) to[c0 + i] = chunk[i];
        }
        __syncthreads();
    }
}

// Block b takes slots b, b + gridDim.x, …: it waits until the host has answered (every block reads DONE
// itself, so none depends on another being resident), then copies each slot the host computed (its
// mailbox id without MB_HELD: neither held nor streamed) from the mailbox into eo (T·k rows of n), over
// what the card's gathers wrote there.
template <bool COUNTED>
__device__ __forceinline__ void miss_take_body(const u32* box, int t, int k, int n, float* __restrict__ eo,
                                               const int* __restrict__ skip) {
    grid_dep_wait();
    if (COUNTED && skip[0]) return;  // nothing asked of the host (miss_ask_counted)
    __shared__ int answered;
    if (threadIdx.x == 0) {
        u32 v;
        do {
            asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(box + MB_DONE) : "memory");
            if (v != 1) __nanosleep(200);
        } while (v != 1);
        answered = 1;
    }
    __syncthreads();
    const volatile u32* w = box;
    const size_t out = MB_IDS + (size_t)MB_MAX_T * k + (size_t)MB_MAX_T * n;
    for (int s = blockIdx.x; s < t * k && answered; s += gridDim.x) {
        if (w[MB_IDS + s] & MB_HELD) continue;
        for (int i = threadIdx.x; i < n; i += blockDim.x) eo[(size_t)s * n + i] = __uint_as_float(w[out + (size_t)s * n + i]);
    }
}

extern "C" __global__ void miss_take(const u32* box, int t, int k, int n, float* __restrict__ eo) {
    miss_take_body<false>(box, t, k, n, eo, nullptr);
}

extern "C" __global__ void miss_take_counted(const u32* box, int t, int k, int n, float* __restrict__ eo,
                                            const int* __restrict__ skip) {
    miss_take_body<true>(box, t, k, n, eo, skip);
}

// A placed block's prompt window (ops/moe/window.rs, docs/PLACEMENT.md "Prompt windows"): the window's
// M = T·k slots, its experts `ids`, planned in one block so that each expert the card does not hold is
// brought over the bus once for every token that chose it. Out:
// - `held_ids[ts]`: the slot's cache slot where the card holds its expert, else −1 (the held pass);
// - chunk c < C of at most S experts and L slots: `chunk_of[c·S + j]` the expert brought into stream slot
//   held + j (−1 for none), `chunk_list[c·L + i]` its i-th slot (−1 for none) and `chunk_ids[c·L + i]`
//   that slot's cache slot; an expert's slots lie in one chunk, in slot order, the experts in id order;
// - `host_slot[ts]`: 1 where the host computes the slot (an expert it cannot stream: outside lo..hi, or
//   chosen by more than L slots), asked tile by tile (miss_ask_window);
// - with `counts`, every slot's expert counted (STRATA_ASK_MISSES_ONLY's table, for the cache's ranking).
// One thread assigns the chunks (in id order, so the plan is the same at every replay); the rest are
// loops over slots or experts. At most MW_MAX_M slots and MW_MAX_E experts (ops/moe/window.rs checks).
#define MW_MAX_M 4096
#define MW_MAX_E 1024
#define MW_HOST -2
extern "C" __global__ void miss_window_plan(const int* __restrict__ ids, int M, const int* __restrict__ slot_of, int E,
                                            int lo, int hi, u32* __restrict__ counts, int S, int L, int C,
                                            int* __restrict__ held_ids, int* __restrict__ host_slot,
                                            int* __restrict__ chunk_of, int* __restrict__ chunk_list,
                                            int* __restrict__ chunk_ids, int held) {
    grid_dep_wait();
    __shared__ int expert[MW_MAX_M], cnt[MW_MAX_E], place[MW_MAX_E];
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    for (int i = threadIdx.x; i < C * S; i += blockDim.x) chunk_of[i] = -1;
    for (int i = threadIdx.x; i < C * L; i += blockDim.x) {
        chunk_list[i] = -1;
        chunk_ids[i] = -1;
    }
    __syncthreads();
    for (int ts = threadIdx.x; ts < M; ts += blockDim.x) {
        const int e = ids[ts], s = slot_of[e];
        expert[ts] = e;
        held_ids[ts] = s;
        host_slot[ts] = 0;
        if (counts) atomicAdd(counts + e, 1u);
        if (s < 0) atomicAdd(cnt + e, 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        // place[e]: chunk c, first list entry i and stream slot j as c·2^16 + i·2^8 + j (L, S ≤ 64);
        // MW_HOST for the host's.
        int c = 0, slots = 0, used = 0;
        for (int e = 0; e < E; e++) {
            const int n = cnt[e];
            if (n == 0) continue;
            if (e < lo || e >= hi || n > L) {
                place[e] = MW_HOST;
                continue;
            }
            if (used == S || slots + n > L) {
                c++;
                slots = 0;
                used = 0;
            }
            if (c >= C) {  // past the host's bound (it cannot be): left to the host, never lost
                place[e] = MW_HOST;
                continue;
            }
            place[e] = (c << 16) | (slots << 8) | used;
            chunk_of[c * S + used] = e;
            slots += n;
            used++;
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        if (cnt[e] == 0) continue;
        const int p = place[e];
        const int base = p == MW_HOST ? 0 : (p >> 16) * L + ((p >> 8) & 0xff), id = held + (p & 0xff);
        for (int ts = 0, r = 0; ts < M; ts++) {
            if (expert[ts] != e) continue;
            if (p == MW_HOST) {
                host_slot[ts] = 1;
            } else {
                chunk_list[base + r] = ts;
                chunk_ids[base + r] = id;
            }
            r++;
        }
    }
}

// A window's tile (t ≤ 8 tokens) asked of the host for the slots the plan left to it (`host_slot`), the
// others marked MB_HELD; `skip[0]` says whether none was (then the mailbox is left alone, and
// miss_take_counted returns at once). The same mailbox words as miss_ask's; the routings were counted by
// the plan.
extern "C" __global__ void miss_ask_window(u32* box, int layer, int t, int k, int n, const int* __restrict__ ids,
                                           const int* __restrict__ host_slot, const float* __restrict__ x,
                                           int* __restrict__ skip) {
    grid_dep_wait();
    int mine = 0;
    for (int i = threadIdx.x; i < t * k; i += blockDim.x) mine |= host_slot[i];
    if (!__syncthreads_or(mine)) {
        if (threadIdx.x == 0) skip[0] = 1;
        return;
    }
    volatile u32* w = box;
    if (threadIdx.x == 0) {
        skip[0] = 0;
        w[MB_DONE] = 0;
        w[MB_LAYER] = (u32)layer;
        w[MB_TOKENS] = (u32)t;
    }
    for (int i = threadIdx.x; i < t * k; i += blockDim.x) w[MB_IDS + i] = host_slot[i] ? (u32)ids[i] : ((u32)ids[i] | MB_HELD);
    const size_t xs = MB_IDS + (size_t)MB_MAX_T * k;
    for (int i = threadIdx.x; i < t * n; i += blockDim.x) w[xs + i] = __float_as_uint(x[i]);
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) w[MB_ASKED] = 1;
}
