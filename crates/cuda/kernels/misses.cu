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
extern "C" __global__ void miss_ask(u32* box, int layer, int t, int k, int n, const int* __restrict__ ids,
                                    const int* __restrict__ slot_of, const float* __restrict__ x,
                                    int* __restrict__ cache_ids) {
    grid_dep_wait();
    volatile u32* w = box;
    if (threadIdx.x == 0) {
        w[MB_DONE] = 0;
        w[MB_LAYER] = (u32)layer;
        w[MB_TOKENS] = (u32)t;
    }
    for (int i = threadIdx.x; i < t * k; i += blockDim.x) {
        const int e = ids[i], s = slot_of[e];
        cache_ids[i] = max(s, 0);
        w[MB_IDS + i] = s < 0 ? (u32)e : ((u32)e | MB_HELD);
    }
    const size_t xs = MB_IDS + (size_t)MB_MAX_T * k;
    for (int i = threadIdx.x; i < t * n; i += blockDim.x) w[xs + i] = __float_as_uint(x[i]);
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) w[MB_ASKED] = 1;
}

// Block b takes slots b, b + gridDim.x, …: it waits until the host has answered (every block reads DONE
// itself, so none depends on another being resident), then copies each slot the host computed (one whose
// expert the layer's residency table `slot_of` does not hold: the table miss_ask read, in card memory, so
// no read crosses the bus to tell) from the mailbox into eo (T·k rows of n), over what the card's gathers
// wrote there. Each read of the mailbox crosses the bus: 16 bytes a load where n allows, a thread's loads
// issued before its stores, so their round trips overlap.
extern "C" __global__ void miss_take(const u32* box, int t, int k, int n, const int* __restrict__ ids,
                                     const int* __restrict__ slot_of, float* __restrict__ eo) {
    grid_dep_wait();
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
    const size_t out = MB_IDS + (size_t)MB_MAX_T * k + (size_t)MB_MAX_T * n;
    for (int s = blockIdx.x; s < t * k && answered; s += gridDim.x) {
        if (slot_of[ids[s]] >= 0) continue;
        const u32* src = box + out + (size_t)s * n;  // 16-byte aligned where n % 4 == 0 (ops/misses.rs)
        float* dst = eo + (size_t)s * n;
        if (n % 4 == 0) {
            const int n4 = n / 4;
            for (int i0 = threadIdx.x; i0 < n4; i0 += 4 * blockDim.x) {
                uint4 v[4];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int i = i0 + j * blockDim.x;
                    if (i < n4)
                        asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                                     : "=r"(v[j].x), "=r"(v[j].y), "=r"(v[j].z), "=r"(v[j].w)
                                     : "l"(src + 4 * i));
                }
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int i = i0 + j * blockDim.x;
                    if (i < n4) reinterpret_cast<float4*>(dst)[i] = make_float4(__uint_as_float(v[j].x), __uint_as_float(v[j].y), __uint_as_float(v[j].z), __uint_as_float(v[j].w));
                }
            }
        } else {
            const volatile u32* w = src;
            for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = __uint_as_float(w[i]);
        }
    }
}
