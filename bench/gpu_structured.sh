#!/usr/bin/env bash
# One device call: structured output and log-probabilities on the GPU against the CPU. The built-in model
# served on the CPU (plain decoding), on the GPU with its default `--spec auto` and with `--spec 3` (verify
# windows whose logits come to the host, each position masked and drawn there); the same requests
# (log-probabilities at temperature 0 and 1, a JSON schema and a forced tool call sampled at temperature 1
# with seeds) must give the same replies and the same numbers, byte for byte: the grammar masks and the
# log-softmax run on the host, on logits that are the same bits.
# Run from the repo root with the binary in .dev/strata.
set -uo pipefail
bin=${STRATA_BIN:-.dev/strata}
export STRATA_CACHE=${STRATA_CACHE:-/tmp/strata-cache}
t=$(mktemp -d)
for f in .dev/*.xz; do [ -e "${f%.xz}" ] || xz -dkf "$f"; done
chmod +x "$bin"
up() { # port, then strata serve's arguments: starts it and waits for /health
  local port=$1; shift
  $bin serve --port $port "$@" > $t/serve-$port.log 2>&1 &
  for _ in $(seq 1 600); do curl -sf localhost:$port/health >/dev/null && return 0; sleep 0.5; done
  echo "serve on $port did not start:"; cat $t/serve-$port.log; return 1
}
up 18201 --device cuda && up 18202 --device cpu && up 18203 --device cuda --spec 3 || exit 1
schema='{"type":"object","additionalProperties":false,"required":["title","stars"],"properties":{"title":{"type":"string","maxLength":24},"stars":{"type":"integer","minimum":1,"maximum":5}}}'
user='[{"role":"user","content":"Rate a fortune."}]'
bodies=(
  "chat /v1/chat/completions {\"messages\":$user,\"max_tokens\":32,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":5}"
  "chat /v1/chat/completions {\"messages\":$user,\"max_tokens\":32,\"temperature\":1,\"seed\":7,\"logprobs\":true,\"top_logprobs\":2}"
  "chat /v1/chat/completions {\"messages\":$user,\"max_tokens\":64,\"temperature\":1,\"seed\":3,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"r\",\"schema\":$schema}},\"logprobs\":true}"
  "chat /v1/chat/completions {\"messages\":$user,\"max_tokens\":64,\"temperature\":1,\"seed\":4,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"rate\",\"parameters\":$schema}}],\"tool_choice\":\"required\"}"
  "completion /v1/completions {\"prompt\":\"The moon\",\"max_tokens\":16,\"temperature\":0,\"logprobs\":3}"
)
same=0; differ=0
for i in "${!bodies[@]}"; do
  read -r kind path body <<< "${bodies[$i]}"
  for port in 18201 18202 18203; do
    curl -s localhost:$port$path -d "$body" | python3 -c '
import json, sys
r = json.load(sys.stdin)
c = r["choices"][0]
print(json.dumps([c.get("message") and {k: v for k, v in c["message"].items() if k != "tool_calls"}, c.get("text"), c["logprobs"],
                  [x["function"] for x in (c.get("message") or {}).get("tool_calls") or []]], sort_keys=True))' > $t/$i-$port.json
  done
  if cmp -s $t/$i-18201.json $t/$i-18202.json && cmp -s $t/$i-18203.json $t/$i-18202.json && [ -s $t/$i-18201.json ]; then
    same=$((same + 1)); echo "request $i ($kind): SAME on cuda, cuda --spec 3 and cpu: $(head -c 300 $t/$i-18201.json)"
  else
    differ=$((differ + 1)); echo "request $i ($kind): DIFFER"
    for port in 18201 18203 18202; do head -c 600 $t/$i-$port.json; echo; done
  fi
done
echo "structured output and log-probabilities: $same SAME, $differ DIFFER"
echo "the --spec 3 server's speculation: $(curl -s localhost:18203/v1/status | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["speculation"]))')"
echo "the GPU server's /v1/status (the monitor's figures): $(curl -s localhost:18201/v1/status | python3 -c 'import json,sys; s=json.load(sys.stdin); print(json.dumps({k: s[k] for k in ["device_memory", "cache", "last"]}))')"
