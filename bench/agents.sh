#!/usr/bin/env bash
# Issue 39: the real coding agents against `strata serve` (the built-in model on the CPU, 127.0.0.1 only),
# each with its default settings: Claude Code (`claude -p`, ANTHROPIC_BASE_URL) and Codex (`codex exec`,
# a provider with wire_api = "responses"). "Works" means the protocol: the agent exits 0 with a reply
# (a 15M-parameter model's words are not the point). Needs node/npm (the packages are installed into
# $WORK); takes minutes on two cores (Claude Code's prompt is about 31K tokens). Usage:
# bench/agents.sh [STRATA_BINARY]. Log: $OUT/agents.log (or /tmp).
set -uo pipefail
bin=${1:-target/release/strata}
WORK=${WORK:-/tmp/strata-agents}
PORT=${PORT:-18181}
exec > >(tee ${OUT:-/tmp}/agents.log) 2>&1
mkdir -p $WORK/claude-work $WORK/codex-work $WORK/codex-home
(cd $WORK && npm install --no-audit --no-fund @anthropic-ai/claude-code @openai/codex 2>&1 | tail -1)
echo "claude $($WORK/node_modules/.bin/claude --version), $($WORK/node_modules/.bin/codex --version)"
$bin serve --port $PORT --device cpu > $WORK/serve.log 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
until grep -q "listening on" $WORK/serve.log; do sleep 1; kill -0 $server || { cat $WORK/serve.log; exit 1; }; done
status=0
echo "== claude -p"
(cd $WORK/claude-work && ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT ANTHROPIC_API_KEY=unused DISABLE_TELEMETRY=1 \
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 timeout 1200 $WORK/node_modules/.bin/claude -p "Say hello." --max-turns 1)
rc=$?; echo "claude exit: $rc"; [ $rc = 0 ] || status=1
cat > $WORK/codex-home/config.toml <<TOML
model = "strata-fortunes"
model_provider = "strata"

[model_providers.strata]
name = "strata"
base_url = "http://127.0.0.1:$PORT/v1"
wire_api = "responses"
env_key = "STRATA_KEY"
TOML
echo "== codex exec"
(cd $WORK/codex-work && CODEX_HOME=$WORK/codex-home STRATA_KEY=unused timeout 1200 \
  $WORK/node_modules/.bin/codex exec --skip-git-repo-check "Say hello." 2>/dev/null)
rc=$?; echo "codex exit: $rc"; [ $rc = 0 ] || status=1
echo "== the server's log"
grep -vE "^(model|serving|listening)" $WORK/serve.log
exit $status
