// A verify window's rewind on the device (docs/SPECULATION.md; the twin of crates/model/src/rewind.rs):
// the window's kernels kept the state after each of its tokens in slots (gdn.cu's delta and conv, the
// PLE history), and a rewind to the point after token t copies slot t over each state. Copies only: no
// value is computed, so no bit can change.
//
// One launch for every state: entry y of `table` is (state, slots, floats a slot), blockIdx.y the entry.
// The slot is an argument, so a step graph keeps this launch and only t changes between windows.
extern "C" __global__ void rewind_slots(const unsigned long long* __restrict__ table, int t) {
    grid_dep_wait();
    const unsigned long long* e = table + 3 * (size_t)blockIdx.y;
    float* dst = reinterpret_cast<float*>(e[0]);
    const size_t len = (size_t)e[2];
    const float* src = reinterpret_cast<const float*>(e[1]) + (size_t)t * len;
    const size_t step = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    // Four floats at a time (the host keeps every entry's length a multiple of 4 and its slots 16-byte
    // aligned).
    const float4* s4 = reinterpret_cast<const float4*>(src);
    float4* d4 = reinterpret_cast<float4*>(dst);
    for (size_t i = first; i < len / 4; i += step) d4[i] = s4[i];
}
