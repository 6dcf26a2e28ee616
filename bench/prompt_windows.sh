#!/usr/bin/env bash
# One device call: a prompt read on the GPU in windows of W tokens (STRATA_PROMPT_WINDOW; past the kernels'
# 8 each op runs over tiles of 8, backend/forward.rs) on the full-size synthetic model. For each W in
# WINDOWS (default "8 32 64"), in ROUNDS interleaved rounds (default 2): the prompt rate of DEPTH tokens
# (default 4096) and the device memory the run held; then the logits of the tokens after the prompt
# (--dump-logits) compared byte for byte with W = 8's. Run from the repo root with .dev/strata.
set -uo pipefail
windows=${WINDOWS:-8 32 64}
depth=${DEPTH:-4096}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source "$(dirname "$0")/full_model.sh"
seq 1 $depth > $t/ids.txt
for r in $(seq 1 ${ROUNDS:-2}); do
  for w in $windows; do
    STRATA_PROMPT_WINDOW=$w $bin run -m $model --prompt-tokens @$t/ids.txt -n 4 --ignore-eos --spec 0 \
      --device cuda --max-context $(( depth + 16 )) --dump-logits $t/logits-$w.f32 > /dev/null 2> $t/run.log
    rate=$(sed -n 's/.*prompt: [^(]*(\([0-9.]*\) tok\/s).*/\1/p' $t/run.log)
    mem="$(grep -o "scratch [0-9.]* GiB" $t/run.log | head -1), $(grep -o "[0-9]* MiB of arena" $t/run.log | head -1)"
    same=$(cmp -s $t/logits-$w.f32 $t/logits-8.f32 && echo SAME || echo DIFFER)
    echo "round $r, window $w: prompt $rate tok/s; plan: $mem; logits after the prompt against W = 8: $same"
    grep -E "^error|panicked" $t/run.log
  done
done
