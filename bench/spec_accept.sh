#!/usr/bin/env bash
# Speculation on the built-in model over held-out text (fixtures/fortunes/heldout.txt): each fortune's
# first words as a prompt, greedy, 64 tokens, for each number of drafts; the acceptance by draft position,
# tokens a verify pass (the tokens after each run's first, which the prompt's pass gives), and the decode
# rate against plain decoding (--spec 0) over the same prompts.
# Usage: bench/spec_accept.sh [DEVICE (cpu)] — PROMPTS (24), N_LIST ("1 2 3 4 7"), STRATA_BIN,
# DRAFT_VOCAB (K: drafts choose among the K tokens the run has seen most often, then the lowest ids;
# the text is the same; STRATA_DRAFT_BY_ID=1: the first K ids), and CONTEXT=1: every other held-out fortune
# (about 1,000 tokens) before each prompt, as a conversation's earlier turns would be.
set -uo pipefail
bin=${STRATA_BIN:-target/release/strata}
device=${1:-cpu}
t=$(mktemp -d)
# The first line of each fortune, its first six words.
awk 'BEGIN { RS = "%\n" } { split($0, l, "\n"); n = split(l[1], w, " "); s = ""; for (i = 1; i <= n && i <= 6; i++) s = s (i > 1 ? " " : "") w[i]; if (s != "") print s }' \
  fixtures/fortunes/heldout.txt | head -n ${PROMPTS:-24} > $t/prompts.txt
# Each prompt in a file of its own, with the other fortunes before it under CONTEXT=1.
i=0
while read -r p; do
  i=$((i + 1))
  if [ "${CONTEXT:-0}" = 1 ]; then
    awk -v skip=$i 'BEGIN { RS = "%\n"; ORS = "%\n" } NR != skip' fixtures/fortunes/heldout.txt > $t/p$i.txt
  else
    : > $t/p$i.txt
  fi
  printf '%s' "$p" >> $t/p$i.txt
done < $t/prompts.txt
echo "$(wc -l < $t/prompts.txt) prompts$([ "${CONTEXT:-0}" = 1 ] && echo ", each after the other fortunes"); $($bin --version); device $device; draft vocabulary $([ "${DRAFT_VOCAB:-0}" = 0 ] && echo all || echo "$DRAFT_VOCAB tokens, $([ "${STRATA_DRAFT_BY_ID:-0}" = 1 ] && echo "the first ids" || echo "the most seen first")"); $(date -u +%F)"
for n in 0 ${N_LIST:-1 2 3 4 7}; do
  : > $t/runs.txt
  for i in $(seq 1 $(wc -l < $t/prompts.txt)); do
    $bin run --device $device -p "$(cat $t/p$i.txt)" -n 64 --ignore-eos --spec $n --draft-vocab ${DRAFT_VOCAB:-0} 2>&1 >/dev/null | grep -E "^(speculation|prompt):" >> $t/runs.txt
  done
  # Totals: decode tokens and seconds; passes; per position accepted/drafted.
  awk -v n=$n '
    /^prompt:/ { runs++; for (i = 1; i <= NF; i++) if ($i == "decode:") { tok += $(i + 1); sec += $(i + 4) } }
    /^speculation:/ {
      passes += $2; drafts += $4; acc += $6
      s = $0; sub(/.*by position /, "", s); sub(/\);.*/, "", s); m = split(s, parts, ", ")
      for (i = 1; i <= m; i++) { split(parts[i], ad, "/"); a[i] += ad[1]; d[i] += ad[2] }
    }
    END {
      line = sprintf("| %d | %.1f |", n, tok / sec)
      if (n > 0) {
        per = ""; for (i = 1; i <= n; i++) per = per (i > 1 ? ", " : "") (d[i] ? sprintf("%.0f%%", 100 * a[i] / d[i]) : "-")
        line = line sprintf(" %.1f%% | %s | %.2f |", 100 * acc / drafts, per, (tok - runs) / passes)
      } else line = line " | | |"
      print line
    }' $t/runs.txt
done | { echo "| drafts N | decode tok/s | acceptance | by draft position | tokens a pass |"; echo "|---:|---:|---:|---|---:|"; cat; }
rm -rf $t
