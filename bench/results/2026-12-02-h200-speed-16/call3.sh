#!/usr/bin/env bash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
timeout 200 bash bench/gpu_candidates.sh STRATA_QDOT_STAGE=cluster
date -u
ROUNDS=3 timeout 380 bash bench/engine_ab.sh "" STRATA_QDOT_STAGE=cluster STRATA_DEFINES=QDOT_ROW_AHEAD=1 "STRATA_QDOT_STAGE=cluster STRATA_DEFINES=QDOT_ROW_AHEAD=1"
date -u
