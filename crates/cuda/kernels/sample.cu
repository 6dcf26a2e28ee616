// A token drawn from a row of logits (docs/ARITHMETIC.md § sample; twin of ops/sample.rs sample), in one
// block of SAMPLE_THREADS threads. The candidates are the K finite logits with the highest keys, lower id
// first among equals. The block finds the K-th key by a radix select of 8 bits a pass, gathers the K
// candidates (those above it, then the lowest ids of those equal to it), and sorts them by (key, ~id)
// descending (a bitonic sort in shared memory). All threads compute the weights; then one thread makes the
// draw's three running sums in rank order, as the CPU does.
#define SAMPLE_MAX 4096
#define SAMPLE_THREADS 1024

// The candidate order key of logit i: its score_key when finite, else 0 (below every finite one's).
__device__ __forceinline__ u32 sample_key(const float* v, int i) {
    const float x = v[i];
    return isfinite(x) ? score_key(x) : 0u;
}

// The block's largest (every thread gets it).
__device__ unsigned long long block_max(unsigned long long x, unsigned long long* part) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, off));
    __syncthreads();
    if (threadIdx.x % WARP == 0) part[threadIdx.x / WARP] = x;
    __syncthreads();
    x = 0;
    for (int w = 0; w < (int)(blockDim.x / WARP); ++w) x = max(x, part[w]);
    return x;
}

extern "C" __global__ void sample(const float* __restrict__ v, int n, float temp, int top_k, float top_p, float u,
                                  int* __restrict__ out) {
    grid_dep_wait();
    __shared__ unsigned long long cand[SAMPLE_MAX];  // (key << 32) | ~id, then (w bits << 32) | id
    __shared__ unsigned long long part[SAMPLE_THREADS / WARP];
    __shared__ u32 hist[256];
    __shared__ u32 before[SAMPLE_THREADS];  // equal keys in the ranges of the threads before
    __shared__ u32 s_prefix, s_remaining, s_count;
    const int tid = threadIdx.x;

    // The greedy id (when cold or nothing is finite) and the number of finite logits.
    unsigned long long best = 0, finite = 0;
    for (int i = tid; i < n; i += blockDim.x) {
        best = max(best, ((unsigned long long)score_key(v[i]) << 32) | (u32)(~i));
        finite += isfinite(v[i]) ? 1 : 0;
    }
    best = block_max(best, part);
    for (int off = 16; off > 0; off >>= 1) finite += __shfl_xor_sync(0xffffffffu, finite, off);
    __syncthreads();
    if (tid % WARP == 0) part[tid / WARP] = finite;
    __syncthreads();
    finite = 0;
    for (int w = 0; w < (int)(blockDim.x / WARP); ++w) finite += part[w];
    const int cap = top_k == 0 ? SAMPLE_MAX : min(top_k, SAMPLE_MAX);
    const int k = (int)min((unsigned long long)cap, finite);
    if (!(temp > 0.0f) || k == 0) {
        if (tid == 0) *out = n > 0 ? (int)(~(u32)(best & 0xffffffffu)) : 0;
        return;
    }

    // The k-th largest key, 8 bits a pass: `remaining` ends as how many keys equal to it are taken.
    u32 prefix = 0, mask = 0, remaining = (u32)k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        if (tid < 256) hist[tid] = 0;
        __syncthreads();
        for (int i = tid; i < n; i += blockDim.x) {
            const u32 key = sample_key(v, i);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            u32 rem = remaining, d = 255;
            for (;; --d) {
                if (hist[d] >= rem || d == 0) break;
                rem -= hist[d];
            }
            s_prefix = prefix | (d << shift);
            s_remaining = rem;
        }
        __syncthreads();
        prefix = s_prefix;
        remaining = s_remaining;
        mask |= 255u << shift;
    }
    const u32 theta = prefix;

    // The candidates: every key above theta, and of those equal to it the `remaining` lowest ids (each
    // thread scans one contiguous range of ids, so the ranges' counts give every equal key its rank).
    const int per = (n + blockDim.x - 1) / blockDim.x, lo = tid * per, hi = min(n, lo + per);
    u32 eq = 0;
    for (int i = lo; i < hi; ++i) eq += sample_key(v, i) == theta ? 1 : 0;
    before[tid] = eq;
    if (tid == 0) s_count = 0;
    __syncthreads();
    if (tid == 0) {
        u32 acc = 0;
        for (int t = 0; t < (int)blockDim.x; ++t) {
            const u32 c = before[t];
            before[t] = acc;
            acc += c;
        }
    }
    __syncthreads();
    u32 rank = before[tid];
    for (int i = lo; i < hi; ++i) {
        const u32 key = sample_key(v, i);
        if (key > theta || (key == theta && rank++ < remaining)) {
            cand[atomicAdd(&s_count, 1u)] = ((unsigned long long)key << 32) | (u32)(~i);
        }
    }
    int kpad = 1;
    while (kpad < k) kpad <<= 1;
    __syncthreads();
    for (int j = k + tid; j < kpad; j += blockDim.x) cand[j] = 0;
    __syncthreads();

    // Bitonic sort, descending: (key, ~id) largest first is key descending, then id ascending.
    for (int size = 2; size <= kpad; size <<= 1) {
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            for (int j = tid; j < kpad; j += blockDim.x) {
                const int partner = j ^ stride;
                if (partner > j) {
                    const unsigned long long a = cand[j], b = cand[partner];
                    const bool down = (j & size) == 0;
                    if (down ? a < b : a > b) {
                        cand[j] = b;
                        cand[partner] = a;
                    }
                }
            }
            __syncthreads();
        }
    }

    // w_j = exp((v_j − v_0) / T) in rank order, kept beside each id.
    const float m = v[~(u32)(cand[0] & 0xffffffffu)];
    __syncthreads();
    for (int j = tid; j < k; j += blockDim.x) {
        const u32 id = ~(u32)(cand[j] & 0xffffffffu);
        const float w = s_exp(__fdiv_rn(__fsub_rn(v[id], m), temp));
        cand[j] = ((unsigned long long)__float_as_uint(w) << 32) | id;
    }
    __syncthreads();
    if (tid != 0) return;
    auto w_at = [&](int j) { return __uint_as_float((u32)(cand[j] >> 32)); };
    auto id_at = [&](int j) { return (int)(u32)(cand[j] & 0xffffffffu); };
    float total = 0.0f;
    for (int j = 0; j < k; ++j) total = __fadd_rn(total, w_at(j));
    int keep = k;
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) {
        acc = __fadd_rn(acc, __fdiv_rn(w_at(j), total));
        if (acc >= top_p) {
            keep = j + 1;
            break;
        }
    }
    float kept = 0.0f;
    for (int j = 0; j < keep; ++j) kept = __fadd_rn(kept, w_at(j));
    float r = __fmul_rn(u, kept);
    for (int j = 0; j < keep; ++j) {
        if (r < w_at(j)) {
            *out = id_at(j);
            return;
        }
        r = __fsub_rn(r, w_at(j));
    }
    *out = id_at(keep - 1);
}
