#!/usr/bin/env bash
# For the session after speed-19 (call 1 of 3, about 5 minutes): the values-dot branch's tip through the
# candidates' checks, alone and with the three opt-ins that shorten a lane (attention's main lane, the
# MoE blocks' side lane). Four
# binaries, stripped, carried in .dev (carry [".dev"]); left there by speed-19, rebuild them if their
# commits moved:
#   .dev/strata-main    main                     (no kernel change in speed-19)
#   .dev/strata-values  values-dot at 9a75138    (the values kernel alone; tag values-alone)
#   .dev/strata-attn    values-dot at 05dd58a    (attention's values, scores and softmax, the indexer's scorer)
#   .dev/strata         values-dot at 6a4a323    (its tip: also the HC up epilogue, the GDN out norm, norm_rope)
# These scripts (and gpu_candidates.sh with qsa_parity) live on main: build the branch's binaries, then
# check main out again before the device call, which runs the working tree's scripts.
# The log is written to $OUT as it goes (a command cut off by its limit returns no output of its own).
exec > >(tee ${OUT:-/tmp}/next1.log) 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
STRATA_BIN=.dev/strata timeout 420 bash bench/gpu_candidates.sh "" \
  "STRATA_QKV_ONCE=1 STRATA_KV_FUSE=1 STRATA_SHARED_GLU=1" \
  | grep -v '^OK\|^ok' | tail -60
date -u
