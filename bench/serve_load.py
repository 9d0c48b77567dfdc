"""The load client of bench/serve.sh: CLIENTS threads, each sending Megatron's PUT /api request
(a PROMPT-token prompt, NEW greedy tokens, no stop token) one after another until SECONDS have
passed. Every answer must be a 200 whose tokens are the prompt's plus NEW, and equal to the
first answer (greedy: the same for everyone). Prints one line: requests, errors, invalid
answers, requests/s, generated tokens/s, p50 and p99 latency. Standard library only.
Usage: serve_load.py PORT CLIENTS SECONDS PROMPT NEW
"""
import http.client
import json
import sys
import threading
import time

port, clients, seconds, prompt_len, new = (int(x) for x in sys.argv[1:6])
body = json.dumps({"prompts": [" ".join(str(100 + i) for i in range(prompt_len))],
                   "tokens_to_generate": new, "top_k": 1, "stop_token": 0})
lock = threading.Lock()
latencies, errors, invalid, answers = [], [0], [0], []
deadline = time.time() + seconds


def client():
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    while time.time() < deadline:
        t0 = time.time()
        try:
            conn.request("PUT", "/api", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            text = r.read()
            ok = r.status == 200
        except OSError:
            ok, conn = False, http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        dt = time.time() - t0
        with lock:
            if not ok:
                errors[0] += 1
                continue
            tokens = json.loads(text)["tokens"][0]
            if len(tokens) != prompt_len + new or (answers and tokens != answers[0]):
                invalid[0] += 1
            answers.append(tokens) if not answers else None
            latencies.append(dt)


start = time.time()
threads = [threading.Thread(target=client) for _ in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.time() - start
latencies.sort()
n = len(latencies)
pct = lambda q: latencies[min(n - 1, int(q * n))] if n else float("nan")  # noqa: E731
print(f"requests={n} errors={errors[0]} invalid={invalid[0]} seconds={elapsed:.1f} "
      f"requests_per_s={n / elapsed:.2f} tokens_per_s={n * new / elapsed:.1f} "
      f"p50_s={pct(0.5):.2f} p99_s={pct(0.99):.2f}")
