#!/usr/bin/env bash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
timeout 150 bash bench/gpu_candidates.sh STRATA_QDOT_STAGE=own:16
date -u
ROUNDS=3 timeout 280 bash bench/engine_ab.sh "" STRATA_QDOT_STAGE=own STRATA_QDOT_STAGE=own:16
date -u
