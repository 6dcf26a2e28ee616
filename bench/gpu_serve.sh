#!/usr/bin/env bash
# One device call: `strata serve` on the GPU. (1) The built-in model served on the GPU and on the CPU gives the
# same greedy replies, a conversation resumed from a saved state among them (the CUDA state restored in
# place); (2) the full-size synthetic model served on the GPU: a streamed reply of N tokens after a prompt
# of DEPTH tokens, timed from the client (bench/serve_stream.py). Usage: bench/gpu_serve.sh [DEPTH] [N]
# (default 4096 and 256); GPU_ARGS (e.g. "--spec 3") go to the GPU's built-in server, whose replies are
# checked against the CPU's plain ones (`--spec auto`, the default, drafts on the GPU where drafts pay).
# Run from the repo root with the binary in .dev/strata.
set -uo pipefail
depth=${1:-4096}
n=${2:-256}
source "$(dirname "$0")/full_model.sh"
up() { # port, then strata serve's arguments: starts it and waits for /health
  local port=$1; shift
  $bin serve --port $port "$@" > $t/serve-$port.log 2>&1 &
  for _ in $(seq 1 600); do curl -sf localhost:$port/health >/dev/null && return 0; sleep 0.5; done
  echo "serve on $port did not start:"; cat $t/serve-$port.log; return 1
}
ask() { # port, JSON body: the reply's content
  curl -s localhost:$1/v1/chat/completions -d "$2" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(json.dumps([r["choices"][0]["message"]["content"], r["usage"]]))'
}
up 18101 --device cuda ${GPU_ARGS:-} && up 18102 --device cpu --spec 0 || exit 1
turn1='{"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":24,"temperature":0}'
same=0; differ=0
for port in 18101 18102; do ask $port "$turn1" > $t/turn1-$port.json; done
reply=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))[0]))' $t/turn1-18101.json)
turn2="{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story.\"},{\"role\":\"assistant\",\"content\":$reply},{\"role\":\"user\",\"content\":\"And then?\"}],\"max_tokens\":24,\"temperature\":0}"
other='{"messages":[{"role":"user","content":"Something else."}],"max_tokens":8,"temperature":0}'
for port in 18101 18102; do
  ask $port "$turn2" > $t/turn2-$port.json       # the live state resumed
  ask $port "$other" > /dev/null
  ask $port "$turn2" > $t/turn3-$port.json       # a saved state restored
done
for f in turn1 turn2 turn3; do
  a=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))[0]))' $t/$f-18101.json)
  b=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))[0]))' $t/$f-18102.json)
  if [ "$a" = "$b" ]; then same=$((same + 1)); echo "$f: SAME on cuda and cpu: $(cat $t/$f-18101.json)"
  else differ=$((differ + 1)); echo "$f: DIFFER: cuda $(cat $t/$f-18101.json) cpu $(cat $t/$f-18102.json)"; fi
done
echo "built-in model served: $same SAME, $differ DIFFER"
kill %1 %2 2>/dev/null; wait 2>/dev/null
up 18103 -m $model --device cuda --max-context $(( depth + n + 8 )) || exit 1
grep -E '^(device|kernels|serving)' $t/serve-18103.log
for r in $(seq 1 ${REPEAT:-2}); do python3 bench/serve_stream.py http://127.0.0.1:18103 $depth $n; done
curl -s localhost:18103/metrics | grep -E '^strata_(time_to_first|prefill|decode|generated)' | head -12
kill %3 2>/dev/null; wait 2>/dev/null
