#!/usr/bin/env bash
# One short device call after a change to how steps are launched (graphs, programmatic launches): the whole
# pass against the CPU on the tiny preset (every T, fp16), then a 4-layer full-width model decoding 256
# tokens after 512 in each launch mode, for the relative speed. Run from the repo root with the binary in
# .dev/strata.
source "$(dirname "$0")/presets.sh"
echo "== tiny, 140 tokens, fp16"; $bin parity forward_parity $t/tiny.gguf --tokens 140 --kv fp16; echo "rc=$?"
$bin synth --preset full --layers 4 --ple-rows-per-head 4096 -o $t/full4.gguf | tail -1
seq 1 512 > $t/ids.txt
for mode in "STRATA_GRAPH=0" "STRATA_PDL=0" "STRATA_PDL=1"; do
  echo "== full width, 4 layers, 512 + 256 tokens, $mode"
  env $mode $bin run -m $t/full4-00001-of-00002.gguf --prompt-tokens @$t/ids.txt -n 256 --ignore-eos \
    --device cuda --max-context 800 2>&1 >/dev/null | grep -v '^note\|^device'
done
