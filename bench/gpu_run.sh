#!/usr/bin/env bash
# One device call: `strata run` on the GPU against the CPU, on the tiny and small synthetic models and the
# built-in trained one:
# the logits rows it dumps must be the same bytes (every KV mode, a chat prompt as text, and a context past
# the trained one, where YaRN scaling is on), and without a dump (greedy tokens from the device's argmax,
# no logits copied, greedy steps recorded a step ahead) the same output again, and again with each step
# recorded only once the token before is known (STRATA_OVERLAP=0); then the decode rate of each
# back-end. Run from the repo root with the release binary carried in .dev/strata.
source "$(dirname "$0")/presets.sh"
ids=$(seq -s, 1 40)
# The first start on a bare machine (kernels compiled, variants checked), then a second start.
for start in first second; do
  t0=$(date +%s%N)
  $bin run -m $t/tiny.gguf --prompt-tokens 1,2,3 -n 4 --device cuda 2>$t/start.err >/dev/null
  echo "$start start to exit: $(( ($(date +%s%N) - t0) / 1000000 )) ms"; grep -v '^prompt' $t/start.err
done
same() { # name, then the arguments of both runs
  local name=$1; shift
  $bin run "$@" --device cpu --dump-logits $t/cpu.f32 >$t/cpu.out 2>$t/cpu.err || { echo "$name: cpu failed"; cat $t/cpu.err; return; }
  $bin run "$@" --device cuda --dump-logits $t/gpu.f32 >$t/gpu.out 2>$t/gpu.err || { echo "$name: cuda failed"; cat $t/gpu.err; return; }
  $bin run "$@" --device cuda >$t/gpu2.out 2>$t/gpu2.err || { echo "$name: cuda (no dump) failed"; cat $t/gpu2.err; return; }
  # Greedy steps recorded only after the token before (STRATA_OVERLAP=0): the same tokens again.
  STRATA_OVERLAP=0 $bin run "$@" --device cuda >$t/gpu3.out 2>$t/gpu3.err || { echo "$name: cuda (STRATA_OVERLAP=0) failed"; cat $t/gpu3.err; return; }
  # A step recorded ahead as one graph (STRATA_GRAPH_SPLIT=0; the default cuts it in two): the same tokens.
  STRATA_GRAPH_SPLIT=0 $bin run "$@" --device cuda >$t/gpu4.out 2>$t/gpu4.err || { echo "$name: cuda (STRATA_GRAPH_SPLIT=0) failed"; cat $t/gpu4.err; return; }
  if cmp -s $t/cpu.f32 $t/gpu.f32 && cmp -s $t/cpu.out $t/gpu.out && cmp -s $t/cpu.out $t/gpu2.out \
    && cmp -s $t/cpu.out $t/gpu3.out && cmp -s $t/cpu.out $t/gpu4.out; then
    echo "$name: SAME ($(stat -c %s $t/cpu.f32) bytes of logits, $(wc -c <$t/cpu.out) bytes of output, also without the dump, with and without STRATA_OVERLAP, in one graph a step)"
  else
    echo "$name: DIFFER"
  fi
  echo "  cpu: $(tail -1 $t/cpu.err)"
  echo "  gpu: $(grep '^device:' $t/gpu.err)"
  echo "  gpu: $(tail -1 $t/gpu.err)"
}
for kv in fp16 int8 f32; do
  same "tiny ids --kv $kv" -m $t/tiny.gguf --prompt-tokens $ids -n 64 --ignore-eos --kv $kv
done
same "tiny chat text" -m $t/tiny.gguf -p "Hello there, how are you?" --chat -n 48 --ignore-eos
# The built-in trained model (no -m): a short prompt, and held-out text long enough for sparse selection.
same "built-in text" -p "Once upon a time" -n 64 --ignore-eos
same "built-in held-out text --kv int8" -p "$(head -c 3000 fixtures/fortunes/heldout.txt)" -n 48 --ignore-eos --kv int8
same "tiny yarn 2x context" -m $t/tiny.gguf --prompt-tokens $ids -n 32 --ignore-eos --max-context 16384
# Generation up to a full context (no step is recorded ahead there).
same "tiny full context" -m $t/tiny.gguf --prompt-tokens $ids -n 64 --ignore-eos --max-context 60
same "tiny sampled" -m $t/tiny.gguf --prompt-tokens $ids -n 32 --ignore-eos --temp 0.8 --top-p 0.9 --seed 7
for kv in fp16 int8; do
  same "small ids --kv $kv" -m $t/small.gguf --prompt-tokens $ids -n 64 --ignore-eos --kv $kv --max-context 4096
done
# The real-tool fixtures (random weights, written by the real converter): bf16, and q8_0 and f32, whose HC
# weights are Q8_0 and F32 (the GPU's `_f32` HC kernels).
for q in bf16 q8_0 f32; do
  same "real $q fixture, text" -m fixtures/real/qwen4exp-real-$q.gguf -p "The quick brown fox" -n 32 --ignore-eos
done
# A context too large for the card: refused with the numbers under --device cuda; run on the CPU with a note
# under auto (the same tokens as --device cpu).
huge=2000000000
if $bin run -m $t/small.gguf --prompt-tokens 1,2,3 -n 4 --device cuda --max-context $huge >/dev/null 2>$t/huge.err; then
  echo "too large, cuda: ran (DIFFER: it should be refused)"
else
  echo "too large, cuda: refused: $(tail -1 $t/huge.err)"
fi
$bin run -m $t/small.gguf --prompt-tokens 1,2,3 -n 4 --device auto --max-context $huge >$t/auto.out 2>$t/auto.err
$bin run -m $t/small.gguf --prompt-tokens 1,2,3 -n 4 --device cpu --max-context $huge >$t/cpuh.out 2>/dev/null
if grep -q 'note: running on the CPU' $t/auto.err && cmp -s $t/auto.out $t/cpuh.out; then
  echo "too large, auto: SAME (on the CPU: $(grep 'note: running on the CPU' $t/auto.err | head -1))"
else
  echo "too large, auto: DIFFER"; cat $t/auto.err
fi
