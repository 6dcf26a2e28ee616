#!/usr/bin/env bash
# For the session after speed-19 (call 3 of 3, if the tip passed and was faster; about 9 minutes): the
# whole check on the tip's binary (with the settings that won in call 2 as arguments, e.g.
# `STRATA_QKV_ONCE=1 STRATA_KV_FUSE=1`, or none), then the 4K figure under them.
exec > >(tee ${OUT:-/tmp}/next3.log) 2>&1
export "$@"
PART=1 QUICK=1 timeout 420 bash bench/gpu_verify.sh | tail -30
PROFILES= REPEAT=3 timeout 150 bash bench/engine.sh 4096
date -u
