# Sourced by the GPU scripts: the binary ($bin, default .dev/strata), the kernel cache, a scratch folder
# ($t) holding the tiny and small presets written afresh, and the card's name and driver printed first.
set -uo pipefail
bin=${STRATA_BIN:-.dev/strata}
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
t=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$bin synth --preset tiny -o $t/tiny.gguf >/dev/null
$bin synth --preset small -o $t/small.gguf >/dev/null
