#!/usr/bin/env bash
# One device call (issue 38): where a placed decode step's miss_take waits. At --gpu-mem 12 with the
# full-size synthetic model, STRATA_PROFILE=kernels decode steps (a 16-token prompt, 48 tokens) with
# STRATA_STREAM_SLOTS=16 (no request leaves the host anything to compute, so miss_take's time is the
# request's round trip alone), at each --threads in THREADS (default "16 12 8 4": the host's team is
# min(threads, cores − 2)); then unprofiled decode rates (a 512-token prompt, 64 tokens, default slots) at
# each. If the wait shrinks with fewer threads, the host's threads crowd out the server or the decoding
# thread. Then STRATA_ASK_MISSES_ONLY=1 against the default (the same logits, and the rates). Run from the
# repo root with .dev/strata. Log: $OUT/miss_wait.log.
set -uo pipefail
exec > >(tee ${OUT:-/tmp}/miss_wait.log) 2>&1
source "$(dirname "$0")/full_model.sh"
seq 1 512 > $t/ids.txt
for th in ${THREADS:-16 12 8 4}; do
  echo "== --threads $th, STRATA_STREAM_SLOTS=16, profiled $(date +%T)"
  STRATA_STREAM_SLOTS=16 STRATA_PROFILE=kernels timeout 200 $bin run -m $model --prompt-tokens $(seq -s, 1 16) \
    -n 48 --ignore-eos --spec 0 --device cuda --gpu-mem 12 --max-context 600 --threads $th 2>&1 >/dev/null \
    > $t/run.log
  sed -n '/profile of .* decode/,/profile of/p' $t/run.log | grep -E "profile of .* decode|miss_"
  # The host's side: each answer's time, and the time from answering one request to seeing the next
  # (about the card's work between its take and its next ask if the host sees each ask at once).
  grep -E "requests of one token" $t/run.log
done
for th in ${THREADS:-16 12 8 4}; do
  echo "== --threads $th, default slots, 512-token prompt, 64 new $(date +%T)"
  timeout 200 $bin run -m $model --prompt-tokens @$t/ids.txt -n 64 --ignore-eos --spec 0 --device cuda \
    --gpu-mem 12 --max-context 600 --threads $th 2>&1 >/dev/null | grep -E "tok/s|requests"
done
# miss_stream by 16-byte loads (STRATA_DEFINES=MISS_STREAM_WIDE=1) against the default: its time a layer.
for d in 0 1 0 1; do
  echo "== MISS_STREAM_WIDE=$d, STRATA_STREAM_SLOTS=16, profiled $(date +%T)"
  STRATA_DEFINES=MISS_STREAM_WIDE=$d STRATA_STREAM_SLOTS=16 STRATA_PROFILE=kernels timeout 200 $bin run -m $model \
    --prompt-tokens $(seq -s, 1 16) -n 48 --ignore-eos --spec 0 --device cuda --gpu-mem 12 --max-context 600 \
    2>&1 >/dev/null | sed -n '/profile of .* decode/,/profile of/p' | grep -E "profile of .* decode|miss_stream"
done
# The card counting its routings and asking only for what the host computes, against the default, twice,
# with the logits of the tokens after the prompt compared.
for r in 1 2; do for a in 0 1; do
  echo "== STRATA_ASK_MISSES_ONLY=$a, default slots, 512-token prompt, 64 new $(date +%T)"
  STRATA_ASK_MISSES_ONLY=$a timeout 200 $bin run -m $model --prompt-tokens @$t/ids.txt -n 64 --ignore-eos --spec 0 \
    --device cuda --gpu-mem 12 --max-context 600 --dump-logits $t/ask-$a.f32 2>&1 >/dev/null | grep -E "tok/s|requests"
done; cmp -s $t/ask-0.f32 $t/ask-1.f32 && echo "logits: SAME" || echo "logits: DIFFER"; done
