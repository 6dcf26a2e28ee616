#!/usr/bin/env bash
# One device call for the window kernels' opt-in variants (docs/SPECULATION.md, "Where the figures
# stand"): every GPU parity test under each variant, then `strata bench spec` at 4K under the default
# and each variant in turn (A/B in one call). TRIES lists the variants, `;` between them (default: the
# narrow window kernels, STRATA_QDOT_NARROW=1, twice, interleaved with the default). The tests take
# about 110 s a variant and the bench about 60 s a setting, so three variants fit one call; run it again
# with other TRIES for more, or with PARITY=0 for the bench alone. Carry .dev/{strata,gpu_parity}.xz built at the same
# commit. Logs in $OUT: tries-tests.log, spec_bench.log.
set -uo pipefail
out=${OUT:-/tmp}
for f in .dev/*.xz; do xz -dkf "$f"; done
chmod +x .dev/strata .dev/gpu_parity 2>/dev/null
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
tries=${TRIES:-"STRATA_QDOT_NARROW=1;STRATA_QDOT_NARROW=0;STRATA_QDOT_NARROW=1"}
IFS=';' read -ra variants <<< "$tries"
# PARITY=0: the bench alone (time every variant in one call, then check the one worth keeping).
for v in "${variants[@]}"; do
  [ "${PARITY:-1}" = 0 ] && break
  echo "== gpu_parity under $v $(date +%T)" >> $out/tries-tests.log
  env $v timeout ${T_TESTS:-130} bash bench/gpu_tests.sh >> $out/tries-tests.log 2>&1
  echo "$v: $(grep -E 'test result' $out/tries-tests.log | tail -1)"
done
AB="$tries" T_BENCH=${T_BENCH:-90} timeout ${T_ALL:-330} bash bench/spec_bench.sh 4096 ${REPS:-16} > /dev/null 2>&1
# One row a setting: the plain step, the verify windows cut to one (T = 2, 4, 8), three drafts, the
# window's share of a pass of three drafts, and the speed-up at a = 0.7 (the forced run's in brackets).
echo "| setting | plain step (ms) | verify T = 2, cut (ms) | T = 4 | T = 8 | three drafts (ms) | window of a pass, N = 3 (ms) | a = 0.7 (forced run) |"
awk '/^-- the same under/ { name = substr($0, 19) }
  /plain step/ { step = $3; if (name == "") name = "default" }
  /^\| 2 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$/ { t2 = $8 }
  /^\| 4 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$/ { t4 = $8 }
  /^\| 8 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$/ { t8 = $8 }
  /^\| 3 \| [0-9.]+ \| 0\.[0-9]+ \| [0-9.]+ \|/ { d3 = $4; w3 = $12 }
  /^\| 0.7 \|/ { print "| " name " | " step " | " t2 " | " t4 " | " t8 " | " d3 " | " w3 " | " $12 "x (" $18 "x) |"; name = "" }' \
  ${LOG:-$out/spec_bench.log}
