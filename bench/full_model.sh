# Sourced by the GPU scripts that run the full-size synthetic model: the binary ($bin, default
# .dev/strata), the kernel cache, the scratch folder $t (/tmp/strata-full, or /tmp/strata-full-zipf with
# ROUTER=zipf: the skewed router) and the model's first file ($model), written there with the machine's
# cores unless a call before left it. The device's 64 GB disk holds one full-size model at a time.
bin=${STRATA_BIN:-.dev/strata}
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
t=/tmp/strata-full${ROUTER:+-$ROUTER}
model=$t/full-00001-of-00002.gguf
mkdir -p $t
# The binary carried compressed (.dev/strata.xz) unpacked beside it.
[ -e "$bin" ] || [ ! -e "$bin.xz" ] || xz -dkf "$bin.xz"
chmod +x "$bin" 2>/dev/null
if [ ! -x "$bin" ]; then  # a call that carried other binaries only: say so, rather than time nothing
  echo "bench/full_model.sh: no binary at $bin (carry .dev/strata, or set STRATA_BIN)" >&2
  exit 1
fi
if [ ! -f $model ]; then
  # The device's disk holds one full-size model: another router's, left by an earlier call, goes first.
  for other in /tmp/strata-full /tmp/strata-full-*; do
    [ "$other" != "$t" ] && [ -d "$other" ] && rm -rf "$other"
  done
  s=$(date +%s)
  $bin synth --preset full --ple-rows-per-head 4096 ${ROUTER:+--router $ROUTER} -o $t/full.gguf | tail -2
  echo "full model written in $(( $(date +%s) - s )) s"
fi
# The median of the numbers on standard input, one a line (nothing for none).
median() {
  sort -n | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
