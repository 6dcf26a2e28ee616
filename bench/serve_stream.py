"""A streamed /v1/completions request timed from the client: the prompt as DEPTH token ids, N new tokens
past the stop tokens (ignore_eos), greedy. Prints the time to the first token and the decode rate of the
rest, as the client sees them, and the server's usage. Standard library only (the device machine has no
API clients). Usage: serve_stream.py BASE_URL DEPTH N"""

import json
import sys
import time
import urllib.request

base, depth, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
body = {"model": "m", "prompt": list(range(1, depth + 1)), "max_tokens": n, "temperature": 0,
        "ignore_eos": True, "stream": True}
req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                             headers={"content-type": "application/json"})
t0 = time.perf_counter()
times, usage, comments = [], None, 0
with urllib.request.urlopen(req) as r:
    for raw in r:
        line = raw.decode().strip()
        if line.startswith(":"):
            comments += 1
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev["choices"][0]["text"]:
            times.append(time.perf_counter() - t0)
        usage = ev.get("usage") or usage
ttft = times[0]
rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
print(f"streamed: prompt {depth} tokens, {len(times)} text chunks for {usage['completion_tokens']} tokens; "
      f"time to first token {ttft * 1000:.0f} ms (prefill {depth / ttft:.1f} tok/s as the client sees it); "
      f"decode {rate:.1f} tok/s; {comments} keep-alive comments; usage {json.dumps(usage)}")
