#!/usr/bin/env bash
# For the session after speed-20 (call 1 of 3, about 6 minutes). Carry [".dev"] with five stripped
# binaries (rebuild them if their commits moved; the README's table gives each one's commit and md5):
#   .dev/strata         main (6703096): e80fc5d's kernels (full_model.sh writes the model with it)
#   .dev/strata-stream  branch stream-kept: the indexer's stream scorer holding a whole key, launch-bounded
#   .dev/strata-pinned  branch pinned-read: small reads (the token) through cached pinned memory
#   .dev/strata-split   branch graph-split: STRATA_GRAPH_SPLIT=k, a decode step as two graphs (opt-in)
#   .dev/strata-combo   branch combo: the three merged
# The combination's checks: the parity tools and the small preset's whole pass (the stream scorer, the
# pinned reads), alone and with the attention main lane's two opt-ins; then `strata run` and checkpoints
# against the CPU with the step split in two graphs (only `strata run`'s decode steps recorded ahead use it).
exec > >(tee ${OUT:-/tmp}/next1.log) 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
STRATA_BIN=.dev/strata-combo timeout 240 bash bench/gpu_candidates.sh "" "STRATA_QKV_ONCE=1 STRATA_KV_FUSE=1" \
  | grep -E '^==|^rc=|^candidate|FAIL' | tail -40
date -u
STRATA_BIN=.dev/strata-combo STRATA_GRAPH_SPLIT=48 timeout 150 bash bench/gpu_run.sh > ${OUT:-/tmp}/run-split.log 2>&1
echo "strata run cpu vs cuda, split: $(grep -c ': SAME' ${OUT:-/tmp}/run-split.log) SAME, $(grep -c 'DIFFER\|failed' ${OUT:-/tmp}/run-split.log) not"
grep 'DIFFER\|failed' ${OUT:-/tmp}/run-split.log | head
date -u
STRATA_BIN=.dev/strata-combo STRATA_GRAPH_SPLIT=48 timeout 100 bash bench/gpu_checkpoint.sh > ${OUT:-/tmp}/checkpoint-split.log 2>&1
echo "checkpoints, split: $(grep -c ': SAME' ${OUT:-/tmp}/checkpoint-split.log) SAME, $(grep -c 'DIFFER\|failed' ${OUT:-/tmp}/checkpoint-split.log) not"
date -u
