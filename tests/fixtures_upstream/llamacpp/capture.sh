#!/usr/bin/env bash
# Re-capture the llama-server fixtures in this folder.
#   LLAMA_SERVER=path/to/llama-server GGUF=path/to/SmolLM2-135M-Instruct.Q4_1.gguf \
#     bash tests/fixtures_upstream/llamacpp/capture.sh OUTDIR
# Loopback only; the server is started and stopped by pid.
set -euo pipefail
OUT="${1:?output folder}"
mkdir -p "$OUT"
PORT="$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')"
BASE="http://127.0.0.1:$PORT"
"$LLAMA_SERVER" --version >"$OUT/version.txt" 2>&1
# run from the model's folder with a bare file name, so the reported model id/path holds no machine path
(cd "$(dirname "$GGUF")" && exec "$LLAMA_SERVER" -m "$(basename "$GGUF")" --host 127.0.0.1 --port "$PORT" --metrics --slots -np 4 -t 1 -c 4096) \
  >"$OUT/server.log" 2>&1 &
PID=$!
trap 'kill "$PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do curl -sf "$BASE/health" >/dev/null && break; sleep 0.5; done

SYS="You are a concise assistant for a railway timetable office. Answer in one short sentence. Always mention the platform number if you know it, never invent departure times, and be polite."
body() {  # body QUESTION STREAM INCLUDE_USAGE MAX_TOKENS
  python3 - "$SYS" "$1" "$2" "$3" "$4" <<'PY'
import json, sys
sys_prompt, q, stream, usage, max_tokens = sys.argv[1:]
b = {"model": "smollm2", "messages": [{"role": "system", "content": sys_prompt},
     {"role": "user", "content": q}], "max_tokens": int(max_tokens), "temperature": 0, "seed": 1}
if stream == "1":
    b["stream"] = True
    if usage == "1":
        b["stream_options"] = {"include_usage": True}
print(json.dumps(b))
PY
}
post() {  # post BODY NAME: headers to NAME.headers.txt, client timings (s) to NAME.client_timing.txt
  curl -sS -D "$OUT/$2.headers.txt" -w '%{stderr}time_starttransfer=%{time_starttransfer} time_total=%{time_total}\n' \
    -H 'Content-Type: application/json' -d "$1" "$BASE/v1/chat/completions" 2>"$OUT/$2.client_timing.txt"
}

curl -sS -D "$OUT/metrics_before.headers.txt" "$BASE/metrics" >"$OUT/metrics_before.txt"
curl -sS "$BASE/slots" >"$OUT/slots_idle_before.json"
curl -sS "$BASE/props" >"$OUT/props.json"
curl -sS "$BASE/v1/models" >"$OUT/v1_models.json"

# 1: non-streamed; 2: streamed with include_usage; 3: streamed without it (same shared system prefix)
post "$(body 'Which platform does the 9:15 to Leeds leave from?' 0 0 24)" chat_nonstream >"$OUT/chat_nonstream.json"
post "$(body 'Is the 10:40 to York running today?' 1 1 24)" chat_stream_usage >"$OUT/chat_stream_include_usage.sse"
post "$(body 'Where can I buy a ticket?' 1 0 24)" chat_stream_nousage >"$OUT/chat_stream_no_usage.sse"
curl -sS -H 'Content-Type: application/json' "$BASE/v1/completions" \
  -d '{"prompt":"The railway station has","max_tokens":8,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' \
  >"$OUT/completions_stream_include_usage.sse"
curl -sS "$BASE/metrics" >"$OUT/metrics_after_sequential.txt"
curl -sS "$BASE/slots" >"$OUT/slots_idle_after.json"

# 6 concurrent long requests on 4 slots: scrape while they run (2 must be deferred)
for i in 1 2 3 4 5 6; do
  post "$(body "Tell me a long story number $i about trains." 0 0 200)" "concurrent_$i" >"$OUT/concurrent_$i.json" &
done
sleep 1.5
curl -sS "$BASE/metrics" >"$OUT/metrics_during_concurrent.txt"
curl -sS "$BASE/slots" >"$OUT/slots_during_concurrent.json"
sleep 4
curl -sS "$BASE/slots" >"$OUT/slots_during_concurrent_decoding.json"
wait_jobs() { for j in $(jobs -p); do [ "$j" = "$PID" ] || wait "$j"; done; }
wait_jobs
curl -sS "$BASE/metrics" >"$OUT/metrics_after_all.txt"

# keep-alive: idle close after the advertised timeout, and the per-connection request limit
python3 - "$PORT" >"$OUT/keepalive_probe.txt" 2>&1 <<'PY'
import http.client, sys, time
port = int(sys.argv[1])
c = http.client.HTTPConnection("127.0.0.1", port)
c.request("GET", "/health"); r = c.getresponse(); r.read()
print("first response Keep-Alive:", r.getheader("Keep-Alive"), "Connection:", r.getheader("Connection"))
for idle in (1.0, 4.0, 6.0):
    time.sleep(idle)
    try:
        c.request("GET", "/health"); r = c.getresponse(); r.read()
        print(f"after {idle}s idle on the same connection: HTTP {r.status}")
    except Exception as e:
        print(f"after {idle}s idle on the same connection: {type(e).__name__}: {e}")
        c.close(); c = http.client.HTTPConnection("127.0.0.1", port)
c.close()
c = http.client.HTTPConnection("127.0.0.1", port)
for i in range(1, 102):
    try:
        c.request("GET", "/health"); r = c.getresponse(); r.read()
    except Exception as e:
        print(f"request {i} on one connection: {type(e).__name__}: {e}"); break
    if r.getheader("Connection") == "close":
        print(f"request {i} on one connection answered with Connection: close"); break
c.close()
PY
kill "$PID"; wait "$PID" 2>/dev/null || true
trap - EXIT
