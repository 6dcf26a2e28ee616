#!/usr/bin/env bash
# Issue 39: the Python clients beyond the CI's (litellm's Anthropic route; every structured-output method
# of langchain and pydantic-ai) against `strata serve` (the built-in model on the CPU, 127.0.0.1 only), in a
# virtual environment of their own. Usage: bench/clients.sh [STRATA_BINARY]. Log: $OUT/clients.log (or /tmp).
set -uo pipefail
bin=${1:-target/release/strata}
WORK=${WORK:-/tmp/strata-clients}
PORT=${PORT:-18182}
exec > >(tee ${OUT:-/tmp}/clients.log) 2>&1
python3 -m venv $WORK && $WORK/bin/pip install -q "openai==3.57.0" "anthropic==2.16.0" "langchain-openai==1.8.1" \
  "pydantic-ai-slim[openai]==2.78.0" "litellm==1.110.2" 2>&1 | grep -v "^WARNING"
$WORK/bin/pip list 2>/dev/null | grep -iE "^(litellm|langchain-openai|pydantic-ai-slim|openai|anthropic) "
$bin serve --port $PORT --device cpu > $WORK/serve.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
until grep -q "listening on" $WORK/serve.log; do sleep 1; kill -0 $server || { cat $WORK/serve.log; exit 1; }; done
echo "== litellm"; $WORK/bin/python bench/clients/litellm_anthropic.py http://127.0.0.1:$PORT 2>&1 | grep -v "LiteLLM:WARNING"
echo "== structured output"; $WORK/bin/python bench/clients/structured.py http://127.0.0.1:$PORT 2>&1 | grep -vE "^\s|^(title|stars)$|troubleshooting"
