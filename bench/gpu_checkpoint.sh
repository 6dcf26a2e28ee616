#!/usr/bin/env bash
# One device call: checkpoints made on either device continue on either. A conversation of two turns on
# the tiny (past sparse selection, a block left incomplete) and small models: turn one saved on the CPU and
# on the GPU (the files must be the same bytes), turn two continued from each file on each device (logits
# and the next checkpoint the same bytes). Run from the repo root with the binary in .dev/strata.
source "$(dirname "$0")/presets.sh"
check() { # name, file a, file b
  if cmp -s "$2" "$3"; then echo "  $1: SAME ($(stat -c %s "$2") bytes)"; else echo "  $1: DIFFER"; fi
}
for m in tiny small; do
  for kv in fp16 int8; do
    echo "== $m, --kv $kv"
    one=$(seq -s, 3 77)      # 75 prompt tokens, then 10 generated: 85 cells, not a whole block
    two=$(seq -s, 100 120)
    common=(-m $t/$m.gguf --kv $kv --ignore-eos --max-context 4096)
    for d in cpu cuda; do
      $bin run "${common[@]}" --prompt-tokens $one -n 10 --device $d --save-state $t/one-$d.st >/dev/null 2>$t/err \
        || { echo "  turn one on $d failed:"; cat $t/err; }
    done
    check "turn one checkpoint, cpu vs cuda" $t/one-cpu.st $t/one-cuda.st
    for from in cpu cuda; do
      for d in cpu cuda; do
        $bin run "${common[@]}" --prompt-tokens $two -n 12 --device $d --load-state $t/one-$from.st \
          --save-state $t/two-$from-$d.st --dump-logits $t/two-$from-$d.f32 >/dev/null 2>$t/err \
          || { echo "  turn two from $from on $d failed:"; cat $t/err; }
      done
    done
    for x in cpu-cuda cuda-cpu cuda-cuda; do
      check "turn two logits, saved on ${x%-*}, continued on ${x#*-} (vs cpu-cpu)" $t/two-cpu-cpu.f32 $t/two-$x.f32
      check "turn two checkpoint, ${x} (vs cpu-cpu)" $t/two-cpu-cpu.st $t/two-$x.st
    done
  done
done
