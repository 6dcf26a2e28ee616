#!/usr/bin/env bash
# One device call: stream slots (docs/PLACEMENT.md, "Stream slots"; STRATA_STREAM_SLOTS) on the full-size
# synthetic model (bench/full_model.sh; ROUTER=zipf for the skewed router). First the bits: `--dump-logits`
# over 20 prompt tokens and 48 generated with the whole model on the card, then at each "BUDGET S EVERY"
# of CHECKS (default: 12 GiB with 0, 3 and 4 stream slots, 6 with the cache re-ranked after every pass,
# and 32 GiB with 3; S "default" leaves the engine's own), each compared byte for byte with the whole model's; each run's cache line and rates
# are printed. Then, unless ROWS=0, bench/placed_bench.sh's 4K rows at 12 GiB with S = 0, 2, 4 and 6.
# Carry .dev/strata.xz. Log: $OUT/placed_streams.log.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/placed_streams.log) 2>&1
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata 2>/dev/null
s0=$(date +%s); t() { echo "[$(( $(date +%s) - s0 )) s]"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source "$(dirname "$0")/full_model.sh"; t
P=$(seq -s, 3 22)
run() {
  timeout 60 $bin run -m $model --prompt-tokens $P -n 48 --ignore-eos --device cuda --max-context 4096 "$@" 2>&1 \
    | grep -E "expert cache:|tok/s|rror|panick|note"
}
rm -f /tmp/logits-whole.bin /tmp/logits-s.bin  # a run that fails leaves no file to compare
run --dump-logits /tmp/logits-whole.bin | sed "s/^/[whole] /"
for c in ${CHECKS:-"12,0,8" "12,3,8" "12,4,8" "12,6,1" "32,3,8"}; do
  IFS=, read -r mem s every <<< "$c"
  tag="[--gpu-mem $mem, STRATA_STREAM_SLOTS=$s, STRATA_CACHE_EVERY=$every]"
  rm -f /tmp/logits-s.bin
  (
    [ "$s" = default ] || export STRATA_STREAM_SLOTS=$s  # "default": the engine's own
    STRATA_CACHE_EVERY=$every run --gpu-mem $mem --dump-logits /tmp/logits-s.bin | sed "s/^/$tag /"
  )
  if [ -s /tmp/logits-whole.bin ] && cmp -s /tmp/logits-whole.bin /tmp/logits-s.bin; then
    echo "$tag logits identical to the whole model's ($(stat -c %s /tmp/logits-s.bin) bytes)"
  else
    echo "$tag LOGITS DIFFER from the whole model's"
  fi
  t
done
[ "${ROWS:-1}" = 0 ] && exit 0
for s in ${SLOTS:-0 2 4 6}; do
  echo "##### STRATA_STREAM_SLOTS=$s"
  STRATA_STREAM_SLOTS=$s HOST_SWEEP=0 SPECS=0 bash "$(dirname "$0")/placed_bench.sh" 4096 12 2>&1 | grep -E "==|expert cache:|prompt:|\[|rror"
done
