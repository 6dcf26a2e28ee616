#!/usr/bin/env bash
# speed-15 call 3: the 4K table at bf2f520, an A/B of the F32/BF16 one-token products staged, and the
# forced matvec layouts call 2's verify did not reach.
date -u
PROFILES= REPEAT=3 timeout 230 bash bench/engine.sh 4096 2>&1 | tee $OUT/call3-engine-4096.txt
date -u
cand="dense=F32:staged+BF16:staged+F16:warp,gather=F32:warp+BF16:warp+F16:warp,window=F32:staged+BF16:staged+F16:stream"
ROUNDS=2 timeout 110 bash bench/engine_ab.sh "" "STRATA_MATVEC=$cand" 2>&1 | tee $OUT/call3-engine-ab.txt
date -u
source bench/presets.sh
( tool moe_parity STRATA_MATVEC=warp
for layout in staged multi wide stream; do
  model tiny STRATA_MATVEC=$layout fp16
  tool moe_parity STRATA_MATVEC=$layout
done ) 2>&1 | tee $OUT/call3-layouts.txt | grep -E '^==|^rc=|^OK|FAIL'
date -u
