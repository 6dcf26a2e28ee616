# Sourced by the GPU scripts: the binary ($bin, default .dev/strata), the kernel cache, a scratch folder
# ($t) holding the tiny and small presets written afresh, and the card's name and driver printed first;
# then `check`, `tool` and `model`, the parity runs of gpu_forward_all.sh and gpu_candidates.sh.
set -uo pipefail
bin=${STRATA_BIN:-.dev/strata}
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
t=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$bin synth --preset tiny -o $t/tiny.gguf >/dev/null
$bin synth --preset small -o $t/small.gguf >/dev/null
# check WHAT SETTINGS CMD…: CMD under SETTINGS (VAR=VALUE words; "" for none).
check() {
  local what=$1 vars=$2
  shift 2
  echo "== $what${vars:+, $vars}"
  env $vars "$@"
  echo "rc=$?"
}
# tool NAME SETTINGS: `strata parity NAME` under SETTINGS.
tool() { check "$1" "$2" $bin parity $1; }
# model PRESET SETTINGS KV…: the whole pass on the tiny (140 tokens) or small (600) preset, each KV mode.
model() {
  local preset=$1 vars=$2 tokens=600
  shift 2
  [ $preset = tiny ] && tokens=140
  for kv in "$@"; do
    check "$preset, $tokens tokens, $kv" "$vars" $bin parity forward_parity $t/$preset.gguf --tokens $tokens --kv $kv
  done
}
