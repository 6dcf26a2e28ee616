#!/usr/bin/env bash
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
ROUNDS=3 timeout 575 bash bench/engine_ab.sh "" STRATA_QDOT_STAGE=own "STRATA_QDOT_STAGE=own STRATA_QDOT_ONCE=dense" "STRATA_QDOT_STAGE=own STRATA_QDOT_ONCE=dense STRATA_DEFINES=QDOT_PIPE=1" STRATA_DEFINES=QDOT_ROW_AHEAD=1
date -u
