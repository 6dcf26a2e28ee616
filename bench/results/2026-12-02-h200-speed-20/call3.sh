#!/usr/bin/env bash
# speed-20 call 3: the values kernel with the tip's three non-attention changes (branch values-keep,
# c51c424: the HC up epilogue, the GDN out norm, norm_rope), without attend_scores per mode, the stream
# scorer and the new softmax (which ran 182.5 against main's 188.9 in call 2). Checks, then 4K A/B with
# each of the two attention changes added back alone, (the figure in a call of its own). Binaries in .dev (carry [".dev"]):
#   strata-main (3676f59), strata-keep (c51c424), strata-kscores (64a83f4 = keep + f19fd10),
#   strata-ksoft (ff12740 = keep + 05dd58a)
exec > >(tee ${OUT:-/tmp}/call3.log) 2>&1
date -u
STRATA_BIN=.dev/strata-keep timeout 130 bash bench/gpu_candidates.sh "" | grep -v '^OK\|^ok' \
  | grep -v 'HC read variant\|QSA scorer\|QSA top-k\|matvec layouts\|^device:' | tail -30
date -u
DEPTH=4096 ROUNDS=3 N=128 timeout 410 bash bench/engine_ab.sh .dev/strata-main .dev/strata-keep \
  .dev/strata-kscores .dev/strata-ksoft
date -u
