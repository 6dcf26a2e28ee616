set -uo pipefail
export STRATA_CACHE=/tmp/strata-cache
for mode in 0 1; do
  for p in matvec_parity moe_parity; do
    STRATA_QDOT_ONCE=$mode timeout 200 .dev/strata parity $p > $OUT/$p-once$mode.log 2>&1; echo "$p once=$mode rc=$? ($(grep -E '^OK|FAIL' $OUT/$p-once$mode.log | tail -1))"
  done
done
for mode in 0 1; do STRATA_QDOT_ONCE=$mode timeout 100 .dev/strata bench matvec_bench 30 > $OUT/matvec_bench-once$mode.log 2>&1; echo "matvec_bench once=$mode rc=$?"; done
ROUNDS=2 timeout 330 bash bench/engine_ab.sh ".dev/strata-main" "" "STRATA_QDOT_ONCE=1" > $OUT/engine-ab.txt 2>&1; tail -8 $OUT/engine-ab.txt
