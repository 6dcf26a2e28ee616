set -u
cd $(git rev-parse --show-toplevel)
for f in .dev/*.xz; do xz -dkf "$f"; done; chmod +x .dev/strata .dev/gpu_parity
s0=$(date +%s)
lscpu | grep -E "^(Model name|Thread|Core|Socket|CPU\(s\))"
bash bench/gpu_placed.sh 2>&1 | tee $OUT/gpu_placed.log
echo "[gpu_placed $(( $(date +%s) - s0 )) s]"
bash bench/placed_logits.sh 2>&1 | tee $OUT/placed_logits.log
echo "[placed_logits $(( $(date +%s) - s0 )) s]"
bash bench/placed_bench.sh > /dev/null 2>&1
echo "[placed_bench $(( $(date +%s) - s0 )) s]"
( for n in 1 4 8 16; do echo "== RAYON_NUM_THREADS=$n"; RAYON_NUM_THREADS=$n .dev/strata bench host_qdot --rows 640 --cols 2560 --window 4 --ms 100 --types Q2_0 | grep -E "read|Q2_0 \| $n "; done
  for n in 8 16; do echo "== host_experts RAYON_NUM_THREADS=$n"; RAYON_NUM_THREADS=$n timeout 30 .dev/strata bench host_experts /tmp/strata-full/full-00001-of-00002.gguf --window 4 --ms 300 | grep -E "read|^\|"; done ) 2>&1 | tee $OUT/host_scaling.log
echo "[all $(( $(date +%s) - s0 )) s]"
