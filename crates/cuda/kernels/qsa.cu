// QSA selection for a window of Q = 1..8 queries (spec §5.4-5.5; docs/ARITHMETIC.md § qsa, § topk).
// Twin of crates/model/src/layers/qsa.rs (block_score, then / √di) and ops/topk.rs (select_blocks).

#define MAXQ 8

// The score of spec §0.7: the heads' relu sum divided by √di (IEEE square root and division, as the CPU).
__device__ __forceinline__ float scaled_score(float s, int di) {
    return __fdiv_rn(s, __fsqrt_rn((float)di));
}

// Block scores: s[q][b] = (Σ_h relu(dot(Q[q][h], K[b]))) / √di for b < n_scored[q], heads in order from +0.
// One warp per key block; the warp's lanes own the key's chunks (the reduction contract), so each head's
// dot is the CPU's, and the butterfly leaves it in every lane.
extern "C" __global__ void qsa_scores(const float* __restrict__ keys, const float* __restrict__ queries,
                                      float* __restrict__ scores, const int* __restrict__ n_scored, int n_blocks,
                                      int di, int hi, int Q, int stride) {
    grid_dep_wait();
    const int b = (blockIdx.x * blockDim.x + threadIdx.x) / WARP, lane = threadIdx.x % WARP;
    if (b >= n_blocks) return;
    const float* k = keys + (size_t)b * di;
    const int nch = di / CHUNK;
    for (int q = 0; q < Q; ++q) {
        if (b >= n_scored[q]) continue;
        float s = 0.0f;
        for (int h = 0; h < hi; ++h) {
            const float* qv = queries + ((size_t)q * hi + h) * di;
            float acc = 0.0f;
            for (int ch = lane; ch < nch; ch += WARP) acc = __fadd_rn(acc, chunk_dot(k + ch * CHUNK, qv + ch * CHUNK));
            acc = warp_butterfly(acc);
            if (acc > 0.0f) s = __fadd_rn(s, acc);
        }
        if (lane == 0) scores[(size_t)q * stride + b] = scaled_score(s, di);
    }
}

// The recursive-halving scorer (STRATA_SCORES_HALVE=1): a warp per key block (grid-stride), the queries
// staged in shared memory. Each lane forms its lane total for all 32 (query, head) dots at once (lane L owns
// chunk L of the key; lanes past the last chunk hold +0), then the 32 values are reduced together: at
// offsets 16, 8, 4, 2, 1 each lane keeps half its values and adds its partner's copy of them. Every value's
// additions are the butterfly's pairs (lane l, lane l^o) at the same offsets in the same order, so each
// dot has the butterfly's bits; lane 4q + h ends with (query q, head h).
extern "C" __global__ void qsa_scores_halve(const float* __restrict__ keys, const float* __restrict__ queries,
                                            float* __restrict__ scores, const int* __restrict__ n_scored,
                                            int n_blocks, int di, int hi, int Q, int stride) {
    grid_dep_wait();
    extern __shared__ float sq[];  // [Q][hi][di]
    __shared__ int ns[MAXQ];
    const int lane = threadIdx.x % WARP;
    for (int i = threadIdx.x; i < Q * hi * di; i += blockDim.x) sq[i] = queries[i];
    if (threadIdx.x < MAXQ) ns[threadIdx.x] = threadIdx.x < Q ? n_scored[threadIdx.x] : 0;
    __syncthreads();
    const int warps = gridDim.x * blockDim.x / WARP;
    const int nch = di / CHUNK;
    for (int b = (blockIdx.x * blockDim.x + threadIdx.x) / WARP; b < n_blocks; b += warps) {
        float v[32];
        float kv[CHUNK];
        const bool has = lane < nch;
        if (has) {
            load8_f32(keys + (size_t)b * di + lane * CHUNK, kv);
        }
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            const int q = i / 4, h = i % 4;
            v[i] = (has && q < Q && h < hi) ? __fadd_rn(0.0f, chunk_dot(kv, sq + (q * hi + h) * di + lane * CHUNK)) : 0.0f;
        }
        // Halving: after offset o, the lane's first o/… values are its share.
#pragma unroll
        for (int o = 16, m = 16; o > 0; o >>= 1, m >>= 1) {
            const bool upper = (lane & o) != 0;
#pragma unroll
            for (int i = 0; i < m; ++i) {
                const float send = upper ? v[i] : v[i + m];
                const float keep = upper ? v[i + m] : v[i];
                v[i] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, o));
            }
        }
        // Lane 4q + h holds (q, h); lane 4q adds its query's heads in order.
        float s = 0.0f;
        for (int h = 0; h < 4; ++h) {
            const float d = __shfl_sync(0xffffffffu, v[0], (lane & ~3) + h);
            if (h < hi && d > 0.0f) s = __fadd_rn(s, d);
        }
        const int q = lane / 4;
        if ((lane & 3) == 0 && q < Q && b < ns[q]) scores[(size_t)q * stride + b] = scaled_score(s, di);
    }
}

// The streaming scorer (STRATA_SCORES_STREAM=1): one thread per (key block, query), keys read straight from
// global memory (each thread whole 32-byte sectors), queries in shared memory (a warp shares its query, so
// reads broadcast). The 32 lane totals are added by the butterfly's tree in post-order — leaves in
// bit-reversed lane order, pairs merged as a binary counter carries — so a thread holds a 5-deep stack per
// dot instead of 32 values: same additions, same operands, same bits.
#define STREAM_KEPT 16
// A thread holding a whole key takes 181 registers (sm_90): at most 256 threads a block (the host halves
// the keys a block for Q > 4), or a launch of 64 keys × 8 queries asks for more registers than a
// multiprocessor has and fails.
#define STREAM_THREADS 256
extern "C" __global__ void __launch_bounds__(STREAM_THREADS) qsa_scores_stream(const float* __restrict__ keys, const float* __restrict__ queries,
                                             float* __restrict__ scores, const int* __restrict__ n_scored,
                                             int n_blocks, int di, int hi, int Q, int stride) {
    grid_dep_wait();
    extern __shared__ float sq[];  // [Q][hi][di]
    const int nt = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
    for (int i = tid; i < Q * hi * di; i += nt) sq[i] = queries[i];
    __syncthreads();
    const int q = threadIdx.y;
    if (q >= Q) return;
    const int ns = n_scored[q], nch = di / CHUNK;
    // Keys of at most STREAM_KEPT chunks (di ≤ 128: the model's) are loaded whole before the leaves, every
    // load in flight at once; a leaf's loads inside its loop waited out a round trip each, 16 of them a key.
    const bool kept = nch <= STREAM_KEPT;
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < min(n_blocks, ns); b += gridDim.x * blockDim.x) {
        const float* k = keys + (size_t)b * di;
        const float* x = sq + q * hi * di;
        float kk[STREAM_KEPT][CHUNK];
        if (kept) {
#pragma unroll
            for (int c = 0; c < STREAM_KEPT; ++c)
                if (c < nch) load8_f32(k + c * CHUNK, kk[c]);
        }
        float st[4][6];  // a post-order stack per head (up to 4 heads)
#pragma unroll
        for (int i = 0; i < WARP; ++i) {
            const int l = __brev(i) >> 27;  // the i-th leaf in post-order is lane bitrev5(i)
            float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            // The leaf's chunks l, l + 32, … (with the key kept, at most chunk l): each once for every head.
            for (int c = l; c < nch; c += WARP) {
                float kv[CHUNK];
                if (kept && l < STREAM_KEPT) {
#pragma unroll
                    for (int e = 0; e < CHUNK; ++e) kv[e] = kk[l < STREAM_KEPT ? l : 0][e];
                } else {
                    load8_f32(k + c * CHUNK, kv);
                }
#pragma unroll
                for (int h = 0; h < 4; ++h) {
                    if (h < hi) {
                        float xv[CHUNK];
                        load8_f32(x + h * di + c * CHUNK, xv);
                        v[h] = __fadd_rn(v[h], chunk_dot(kv, xv));
                    }
                }
            }
            const int depth = __popc(i);  // stack depth before the push (a binary counter's set bits)
#pragma unroll
            for (int h = 0; h < 4; ++h) {
                int d = depth;
                st[h][d] = v[h];
#pragma unroll
                for (int t = i + 1; (t & 1) == 0; t >>= 1) {
                    st[h][d - 1] = __fadd_rn(st[h][d - 1], st[h][d]);
                    --d;
                }
            }
        }
        float s = 0.0f;
#pragma unroll
        for (int h = 0; h < 4; ++h)
            if (h < hi && st[h][0] > 0.0f) s = __fadd_rn(s, st[h][0]);
        scores[(size_t)q * stride + b] = scaled_score(s, di);
    }
}

// Exclusive prefix sum over the block's threads, in thread order (integers: exact). Also returns the total.
__device__ int block_exclusive_scan(int v, int* total) {
    __shared__ int warp_sums[32];
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, warps = (blockDim.x + WARP - 1) / WARP;
    int x = v;
#pragma unroll
    for (int off = 1; off < WARP; off <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, off);
        if (lane >= off) x += y;
    }
    if (lane == WARP - 1) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int w = lane < warps ? warp_sums[lane] : 0;
#pragma unroll
        for (int off = 1; off < WARP; off <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, w, off);
            if (lane >= off) w += y;
        }
        if (lane < warps) warp_sums[lane] = w;  // inclusive over warps
    }
    __syncthreads();
    const int before = (warp > 0 ? warp_sums[warp - 1] : 0) + x - v;
    *total = warp_sums[warps - 1];
    __syncthreads();
    return before;
}

// The selection's geometry for one query (spec §0.7): the n_cells / kpool complete blocks are scored
// (`tail` of them: the blocks before the incomplete one), the best top_k / kpool are kept whole (`budget`
// cells), then the n_cells mod kpool cells of the incomplete block; `all` when every complete block is kept
// (then every cell is selected, `width` = n_cells).
struct Sel {
    int n_cells, width, tail, budget;
    bool all;
};

__device__ __forceinline__ Sel sel_of(int n_cells, int top_k, int kpool) {
    Sel s;
    s.n_cells = n_cells;
    s.tail = n_cells / kpool;
    s.budget = (top_k / kpool) * kpool;
    s.all = s.tail <= top_k / kpool;
    s.width = s.all ? n_cells : s.budget + (n_cells - s.tail * kpool);
    return s;
}

// Emits the selected cells of blocks [lo, hi): blocks above τ whole, blocks at τ by tie rank from
// `tie_before` while the tie budget lasts (a whole number of blocks: none is cut), at output positions from
// `pos0`, ascending. Each thread takes a contiguous run, so thread order is block order; the positions come
// from block-wide exclusive scans of integer counts. `skeys` (may be null) holds the keys of blocks from
// `key_base` on, else they are computed from the scores.
__device__ void emit_blocks(const float* s, const u32* skeys, int key_base, int lo, int hi, u32 tau, int tie_cells,
                            int tie_before, int pos0, int kpool, u32* o) {
    const int tid = threadIdx.x, nt = blockDim.x;
    const int per = (hi - lo + nt - 1) / nt, a = min(lo + tid * per, hi), z = min(a + per, hi);
    auto key = [&](int b) { return skeys ? skeys[b - key_base] : score_key(s[b]); };
    int n_tie = 0;
    for (int b = a; b < z; ++b) n_tie += key(b) == tau;
    int total;
    const int j0 = tie_before + block_exclusive_scan(n_tie, &total);
    int kept = 0, j = j0;
    for (int b = a; b < z; ++b) {
        const u32 k = key(b);
        if (k > tau) kept += kpool;
        else if (k == tau) kept += max(0, min(kpool, tie_cells - (j++) * kpool));
    }
    int pos = pos0 + block_exclusive_scan(kept, &total);
    j = j0;
    for (int b = a; b < z; ++b) {
        const u32 k = key(b);
        int take = 0;
        if (k > tau) take = kpool;
        else if (k == tau) take = max(0, min(kpool, tie_cells - (j++) * kpool));
        for (int c = 0; c < take; ++c) o[pos++] = (u32)(b * kpool + c);
    }
}

// Exact selection (spec §5.5) for query q = blockIdx.x: the ascending ids of its selected cells, written to
// out[q·out_stride ..], their number to count[q]. Radix select over the scores' keys finds the threshold
// key τ with its tie budget; every decision is a function of integer counts, so the ids are the CPU's.
extern "C" __global__ void qsa_topk_wide(const float* __restrict__ scores, int stride, const int* __restrict__ n_cells_q,
                                         int top_k, int kpool, u32* __restrict__ out, int out_stride,
                                         int* __restrict__ count) {
    grid_dep_wait();
    __shared__ u32 hist[32][256];  // one histogram per warp: no contention between warps
    __shared__ u32 prefix, mask;
    __shared__ int need;
    const int q = blockIdx.x, tid = threadIdx.x, nt = blockDim.x, warp = tid / WARP;
    const Sel sel = sel_of(n_cells_q[q], top_k, kpool);
    const int n_cells = sel.n_cells, tail = sel.tail, budget = sel.budget, width = sel.width;
    u32* o = out + (size_t)q * out_stride;
    if (sel.all) {
        for (int i = tid; i < n_cells; i += nt) o[i] = (u32)i;
        if (tid == 0) count[q] = n_cells;
        return;
    }
    const float* s = scores + (size_t)q * stride;
    if (tid == 0) { prefix = 0; mask = 0; need = budget; }
    __syncthreads();
    for (int pass = 0; pass < 4; ++pass) {
        const int shift = 24 - 8 * pass;
        for (int i = tid; i < 32 * 256; i += nt) (&hist[0][0])[i] = 0;
        __syncthreads();
        const u32 p = prefix, m = mask;
        for (int b = tid; b < tail; b += nt) {
            const u32 k = score_key(s[b]);
            if ((k & m) == p) atomicAdd(&hist[warp][(k >> shift) & 255u], (u32)kpool);
        }
        __syncthreads();
        // Thread i (< 256) holds digit 255 − i: an exclusive scan in that order gives, per digit, the cells
        // in higher digits; the digit is the one where the running count first reaches `need`.
        int c = 0;
        if (tid < 256) {
            for (int w = 0; w < 32; ++w) c += (int)hist[w][255 - tid];
        }
        const int nd = need;  // read before the scan's barriers; one thread rewrites it below
        int total;
        const int above = block_exclusive_scan(c, &total);
        if (tid < 256 && above < nd && above + c >= nd) {
            need = nd - above;
            prefix = p | ((u32)(255 - tid) << shift);
            mask = m | (255u << shift);
        }
        __syncthreads();
    }
    const u32 tau = prefix;
    const int tie_cells = need;  // cells taken from blocks whose key is τ, lowest block first
    // Each thread owns a contiguous run of blocks, so thread order is block order.
    emit_blocks(s, nullptr, 0, 0, tail, tau, tie_cells, 0, 0, kpool, o);
    // The incomplete block's cells close the list.
    for (int i = tid; i < n_cells - tail * kpool; i += nt) o[budget + i] = (u32)(tail * kpool + i);
    if (tid == 0) count[q] = width;
}

// ---- The split top-k (STRATA_TOPK_SPLIT=1): a query's scored blocks are cut into chunks of TOPK_CHUNK,
// one CTA each, in six short launches: four radix passes (each chunk adds its histogram to the query's
// global one with integer atomics), a count of each chunk's blocks above and at the threshold, and the
// emit. Each CTA derives the digits from the complete histograms by the wide kernel's rule, so τ, the tie
// budget and every emitted id are the wide kernel's.
#define TOPK_CHUNK 2048

// The prefix, mask and remaining need after `passes` passes whose histograms are `gh` ([4][256]).
__device__ void derive(const u32* gh, int passes, int budget, u32* prefix, u32* mask, int* need) {
    __shared__ u32 sp, sm_;
    __shared__ int sn;
    const int tid = threadIdx.x;
    if (tid == 0) { sp = 0; sm_ = 0; sn = budget; }
    __syncthreads();
    for (int pass = 0; pass < passes; ++pass) {
        const int shift = 24 - 8 * pass;
        const int c = tid < 256 ? (int)gh[pass * 256 + 255 - tid] : 0;
        const int nd = sn;
        const u32 p = sp, m = sm_;
        int total;
        const int above = block_exclusive_scan(c, &total);
        if (tid < 256 && above < nd && above + c >= nd) {
            sn = nd - above;
            sp = p | ((u32)(255 - tid) << shift);
            sm_ = m | (255u << shift);
        }
        __syncthreads();
    }
    *prefix = sp;
    *mask = sm_;
    *need = sn;
    __syncthreads();
}

extern "C" __global__ void qsa_topk_split_hist(const float* __restrict__ scores, int stride,
                                               const int* __restrict__ n_cells_q, int top_k, int kpool,
                                               u32* __restrict__ ghist, int pass) {
    grid_dep_wait();
    __shared__ u32 hist[256];
    const int q = blockIdx.y, chunk = blockIdx.x, tid = threadIdx.x;
    const Sel sel = sel_of(n_cells_q[q], top_k, kpool);
    if (sel.all || chunk * TOPK_CHUNK >= sel.tail) return;
    u32* gh = ghist + (size_t)q * 4 * 256;
    u32 p, m;
    int need;
    derive(gh, pass, sel.budget, &p, &m, &need);
    for (int i = tid; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    const int shift = 24 - 8 * pass;
    const float* s = scores + (size_t)q * stride;
    const int hi = min(sel.tail, (chunk + 1) * TOPK_CHUNK);
    for (int b = chunk * TOPK_CHUNK + tid; b < hi; b += blockDim.x) {
        const u32 k = score_key(s[b]);
        if ((k & m) == p) atomicAdd(&hist[(k >> shift) & 255u], (u32)kpool);
    }
    __syncthreads();
    for (int i = tid; i < 256; i += blockDim.x)
        if (hist[i]) atomicAdd(&gh[pass * 256 + i], hist[i]);
}

// Per chunk: blocks above τ and blocks at τ.
extern "C" __global__ void qsa_topk_split_count(const float* __restrict__ scores, int stride,
                                                const int* __restrict__ n_cells_q, int top_k, int kpool,
                                                const u32* __restrict__ ghist, int* __restrict__ gcount, int chunks) {
    grid_dep_wait();
    const int q = blockIdx.y, chunk = blockIdx.x, tid = threadIdx.x;
    const Sel sel = sel_of(n_cells_q[q], top_k, kpool);
    if (sel.all || chunk * TOPK_CHUNK >= sel.tail) return;
    u32 tau, m;
    int need;
    derive(ghist + (size_t)q * 4 * 256, 4, sel.budget, &tau, &m, &need);
    const float* s = scores + (size_t)q * stride;
    const int hi = min(sel.tail, (chunk + 1) * TOPK_CHUNK);
    int above = 0, tie = 0;
    for (int b = chunk * TOPK_CHUNK + tid; b < hi; b += blockDim.x) {
        const u32 k = score_key(s[b]);
        above += k > tau;
        tie += k == tau;
    }
    int ta, tt;
    block_exclusive_scan(above, &ta);
    block_exclusive_scan(tie, &tt);
    if (tid == 0) {
        gcount[((size_t)q * chunks + chunk) * 2] = ta;
        gcount[((size_t)q * chunks + chunk) * 2 + 1] = tt;
    }
}

extern "C" __global__ void qsa_topk_split_emit(const float* __restrict__ scores, int stride,
                                               const int* __restrict__ n_cells_q, int top_k, int kpool,
                                               const u32* __restrict__ ghist, const int* __restrict__ gcount,
                                               int chunks, u32* __restrict__ out, int out_stride,
                                               int* __restrict__ count) {
    grid_dep_wait();
    const int q = blockIdx.y, chunk = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    const Sel sel = sel_of(n_cells_q[q], top_k, kpool);
    u32* o = out + (size_t)q * out_stride;
    if (sel.all) {
        if (chunk == 0) {
            for (int i = tid; i < sel.n_cells; i += nt) o[i] = (u32)i;
            if (tid == 0) count[q] = sel.n_cells;
        }
        return;
    }
    if (chunk * TOPK_CHUNK >= sel.tail) return;
    u32 tau, m;
    int tie_cells;
    derive(ghist + (size_t)q * 4 * 256, 4, sel.budget, &tau, &m, &tie_cells);
    // Ties and kept cells of the chunks before this one (each chunk's kept cells follow from its ties).
    int tie_before = 0, pos0 = 0;
    for (int c = 0; c < chunk; ++c) {
        const int a = gcount[((size_t)q * chunks + c) * 2], t = gcount[((size_t)q * chunks + c) * 2 + 1];
        // t tie blocks from tie rank tie_before take kpool cells each while the tie budget lasts.
        pos0 += a * kpool + min(t * kpool, max(0, tie_cells - tie_before * kpool));
        tie_before += t;
    }
    const float* s = scores + (size_t)q * stride;
    const int base = chunk * TOPK_CHUNK, end = min(sel.tail, base + TOPK_CHUNK);
    emit_blocks(s, nullptr, 0, base, end, tau, tie_cells, tie_before, pos0, kpool, o);
    if (chunk == 0) {
        for (int i = tid; i < sel.n_cells - sel.tail * kpool; i += nt) o[sel.budget + i] = (u32)(sel.tail * kpool + i);
        if (tid == 0) count[q] = sel.width;
    }
}

// ---- The cluster top-k (STRATA_QSA_CLUSTER=1, sm_90 and later): one launch, a cluster of 8 CTAs per
// query, each CTA a contiguous eighth of the scored blocks. The radix passes add the 8 CTAs' histograms
// through distributed shared memory (integers, in rank order); every CTA derives the same digit by the wide
// kernel's rule; the counts of the lower ranks give each CTA its tie rank and output position. The ids are
// the wide kernel's.
#if __CUDA_ARCH__ >= 900
#define CLUSTER 8

// A u32 of CTA `rank`'s shared memory at the address of `p` in ours.
__device__ __forceinline__ u32 dsmem_load(const void* p, u32 rank) {
    const u32 local = (u32)__cvta_generic_to_shared(p);
    u32 remote, v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(remote) : "memory");
    return v;
}

extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1)
    qsa_topk_cluster(const float* __restrict__ scores, int stride, const int* __restrict__ n_cells_q, int top_k,
                     int kpool, u32* __restrict__ out, int out_stride, int* __restrict__ count, int keys_in_smem) {
    grid_dep_wait();
    extern __shared__ u32 skeys[];  // this CTA's keys after the first pass, when they fit (keys_in_smem)
    __shared__ u32 hist[256];
    __shared__ u32 whist[32][256];  // one histogram per warp (no atomic contention between warps)
    __shared__ u32 prefix, mask;
    __shared__ int need;
    __shared__ int cnt[2];  // this CTA's blocks above τ and at τ
    const u32 rank = cluster_rank();
    const int warp = threadIdx.x / WARP, warps = (blockDim.x + WARP - 1) / WARP;
    const int q = blockIdx.y, tid = threadIdx.x, nt = blockDim.x;
    const Sel sel = sel_of(n_cells_q[q], top_k, kpool);
    u32* o = out + (size_t)q * out_stride;
    if (sel.all) {  // the same for the whole cluster: all leave together
        if (rank == 0) {
            for (int i = tid; i < sel.n_cells; i += nt) o[i] = (u32)i;
            if (tid == 0) count[q] = sel.n_cells;
        }
        return;
    }
    const float* s = scores + (size_t)q * stride;
    const int per = (sel.tail + CLUSTER - 1) / CLUSTER;
    const int lo = min((int)rank * per, sel.tail), hi = min(lo + per, sel.tail);
    if (tid == 0) { prefix = 0; mask = 0; need = sel.budget; }
    __syncthreads();
    for (int pass = 0; pass < 4; ++pass) {
        const int shift = 24 - 8 * pass;
        for (int i = tid; i < 32 * 256; i += nt) (&whist[0][0])[i] = 0;
        __syncthreads();
        const u32 p = prefix, m = mask;
        const int nd = need;
        for (int b = lo + tid; b < hi; b += nt) {
            u32 k;
            if (pass == 0 || !keys_in_smem) {
                k = score_key(s[b]);
                if (keys_in_smem) skeys[b - lo] = k;
            } else {
                k = skeys[b - lo];
            }
            if ((k & m) == p) atomicAdd(&whist[warp][(k >> shift) & 255u], (u32)kpool);
        }
        __syncthreads();
        for (int i = tid; i < 256; i += nt) {
            u32 c = 0;
            for (int w = 0; w < warps; ++w) c += whist[w][i];
            hist[i] = c;
        }
        cluster_sync();
        int c = 0;
        if (tid < 256)
            for (u32 r = 0; r < CLUSTER; ++r) c += (int)dsmem_load(&hist[255 - tid], r);
        int total;
        const int above = block_exclusive_scan(c, &total);
        if (tid < 256 && above < nd && above + c >= nd) {
            need = nd - above;
            prefix = p | ((u32)(255 - tid) << shift);
            mask = m | (255u << shift);
        }
        cluster_sync();  // every CTA has read the histograms before any clears its own
    }
    const u32 tau = prefix;
    const int tie_cells = need;
    // This CTA's counts of blocks above and at τ.
    int n_above = 0, n_tie = 0;
    for (int b = lo + tid; b < hi; b += nt) {
        const u32 k = keys_in_smem ? skeys[b - lo] : score_key(s[b]);
        n_above += k > tau;
        n_tie += k == tau;
    }
    int tot_above, tot_tie;
    block_exclusive_scan(n_above, &tot_above);
    block_exclusive_scan(n_tie, &tot_tie);
    if (tid == 0) { cnt[0] = tot_above; cnt[1] = tot_tie; }
    cluster_sync();
    int tie_before = 0, pos0 = 0;
    for (u32 r = 0; r < rank; ++r) {
        const int a = (int)dsmem_load(&cnt[0], r), t = (int)dsmem_load(&cnt[1], r);
        pos0 += a * kpool + min(t * kpool, max(0, tie_cells - tie_before * kpool));
        tie_before += t;
    }
    cluster_sync();  // no CTA leaves while another may still read its counts
    emit_blocks(s, keys_in_smem ? skeys : nullptr, lo, lo, hi, tau, tie_cells, tie_before, pos0, kpool, o);
    if (rank == 0) {
        for (int i = tid; i < sel.n_cells - sel.tail * kpool; i += nt) o[sel.budget + i] = (u32)(sel.tail * kpool + i);
        if (tid == 0) count[q] = sel.width;
    }
}
#endif
