#!/usr/bin/env bash
# For the session after speed-20 (call 4, about 7 minutes): speed-20 ran PART=1 only on the merged kernels
# (e80fc5d: the attention values, the scores per mode, the HC up epilogue, the GDN out norm, norm_rope), so
# the whole pass under the STRATA_DEFINES variants (HC_EARLY=2 loads the changed HC up kernel's weights
# early) and under each forced matvec layout has not run on them: PART=2 QUICK=1 on the binary given as $1
# (main's, or the winner of next2.sh).
exec > >(tee ${OUT:-/tmp}/next4.log) 2>&1
date -u
STRATA_BIN=${1:-.dev/strata} PART=2 QUICK=1 timeout 560 bash bench/gpu_verify.sh
date -u
