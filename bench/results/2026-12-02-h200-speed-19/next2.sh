#!/usr/bin/env bash
# For the session after speed-19 (call 2, right after call 1, if values-dot passed and was faster): the
# whole check on values-dot's binary, then the 4K figure (about 9 minutes). The log goes to $OUT as it goes.
exec > >(tee ${OUT:-/tmp}/next2.log) 2>&1
PART=1 QUICK=1 timeout 420 bash bench/gpu_verify.sh | tail -30
PROFILES= REPEAT=3 timeout 150 bash bench/engine.sh 4096
date -u
