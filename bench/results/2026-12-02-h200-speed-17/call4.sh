#!/usr/bin/env bash
# The default at 4K (three runs), after the first decode step recorded while the prompt's last window
# runs and the PLE table read ahead; the table's read-ahead against none at depth 1,024; the host's time
# for a token's PLE rows alone (`strata bench ple_rows`, 256 random tokens, three rounds, the first cold).
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
date -u
source bench/full_model.sh
$bin bench ple_rows $model
PROFILES= REPEAT=3 bash bench/engine.sh 4096
date -u
ROUNDS=2 bash bench/engine_ab.sh "" STRATA_PLE_WARM=0
date -u
