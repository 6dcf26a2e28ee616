// The draft head over a draft vocabulary (docs/SPECULATION.md, "A draft vocabulary"; twin of the CPU
// decoder's draft head, crates/model/src/decoder.rs): the head's rows of the vocabulary's tokens copied into
// a matrix of their own, then a draft's token read through the vocabulary's list. The products over those
// rows are the head's own (kernels/qdot.cu, kernels/matvec.cu), and the argmax is argmax.cu's.

// Row i of out is row ids[i] of head, byte for byte (row_bytes each): a block a row.
extern "C" __global__ void draft_rows(const unsigned char* __restrict__ head, const int* __restrict__ ids,
                                      unsigned char* __restrict__ out, int row_bytes) {
    grid_dep_wait();
    const unsigned char* src = head + (size_t)ids[blockIdx.x] * row_bytes;
    unsigned char* dst = out + (size_t)blockIdx.x * row_bytes;
    for (int b = threadIdx.x; b < row_bytes; b += blockDim.x) dst[b] = src[b];
}

// The token of the row an argmax over the draft head chose (its word: ~row in the low word, as argmax_put
// reads it), put at tokens[at]: ids[row]; the list's first where the word stayed 0 (no values).
extern "C" __global__ void draft_put(const unsigned long long* __restrict__ best, const int* __restrict__ ids,
                                     int* __restrict__ tokens, int at) {
    grid_dep_wait();
    if (threadIdx.x == 0) tokens[at] = ids[*best == 0 ? 0 : (int)(~(u32)*best)];
}
