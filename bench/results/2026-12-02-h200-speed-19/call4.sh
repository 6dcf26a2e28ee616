#!/usr/bin/env bash
# speed-19 call 4: the attention values by the reduction contract (one kernel, a thread a chunk of 8 cells)
# through attn_parity and the small preset's whole pass, then against the binary before it at 4K.
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
source bench/presets.sh
tool attn_parity ""
model small "" int8 fp16
date -u
DEPTH=4096 ROUNDS=2 N=128 timeout 300 bash bench/engine_ab.sh ".dev/strata-old" ""
date -u
