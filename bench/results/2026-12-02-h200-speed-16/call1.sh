#!/usr/bin/env bash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u; git rev-parse --short HEAD 2>/dev/null
timeout 570 bash bench/gpu_candidates.sh STRATA_QDOT_STAGE=own "STRATA_QDOT_STAGE=own STRATA_QDOT_ONCE=dense" STRATA_DEFINES=QDOT_PIPE=1
date -u
