"""The load generator's own ceiling: how many requests/s ``OpenAIEngine``'s open-loop dispatcher sends on time
against a server that answers at once, and its timing error (client lag = sent - ready) at several rates.

The server is a tiny SSE endpoint in this benchmark (``/v1/completions``, streams ``--tokens`` tokens with no
delay). ``--server thread`` runs it in this process, as a stub in a test would, so its Python work competes
with the client's for the GIL (a pessimistic figure); ``--server process`` (default) runs it in a child
process, which leaves the client's own cost. Each rate is one Poisson schedule of ``--seconds`` seconds, capped
at ``--cap`` requests in flight.

    python benchmarks/loadgen_ceiling.py [--rates 50,100,200,400,800] [--seconds 3] [--server process|thread]

"on time" below: p99 client lag under ``--on-time-ms`` (1 ms) and the achieved send rate within 5% of the
scheduled one. Client lag is what ``sweep.lag_reason`` judges: a run is NOISY when its p99 exceeds 5% of the
run's p50 TTFT, so a p99 lag of L ms here means servers with a p50 TTFT under 20 x L ms cannot be judged from
this machine at that rate.
"""

from __future__ import annotations

import argparse
import http.server
import json
import multiprocessing
import platform
import threading
from typing import Any

import numpy as np

from pytest_gpuperf.inference.arrivals import Arrivals, schedule
from pytest_gpuperf.inference.openai import OpenAIEngine
from pytest_gpuperf.inference.requests import Request


class Instant(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        out = []
        for i in range(body["max_tokens"]):
            chunk = {"choices": [{"text": "x", "logprobs": {"tokens": ["x"], "token_ids": [i]}}]}
            out.append(f"data: {json.dumps(chunk)}\n\n")
        out.append("data: [DONE]\n\n")
        self.wfile.write("".join(out).encode())

    def log_message(self, *args: object) -> None:
        pass


def serve(port_out: Any) -> None:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Instant)
    httpd.daemon_threads = True
    httpd.request_queue_size = 1024
    port_out.put(httpd.server_address[1])
    httpd.serve_forever()


def start_server(kind: str) -> tuple[str, Any]:
    if kind == "thread":
        ports: Any = __import__("queue").Queue()
        worker: Any = threading.Thread(target=serve, args=(ports,), daemon=True)
    else:
        ports = multiprocessing.get_context("spawn").Queue()
        worker = multiprocessing.get_context("spawn").Process(target=serve, args=(ports,), daemon=True)
    worker.start()
    return f"http://127.0.0.1:{ports.get(timeout=30)}", worker


def one_rate(
    engine: OpenAIEngine, rate: float, *, seconds: float, cap: int, tokens: int, on_time_ms: float
) -> dict[str, Any]:
    sched = schedule(Arrivals(rate=rate, duration_s=seconds, seed=0))
    requests = [Request(id=i, prompt=(1, 2, 3), max_new_tokens=tokens) for i in range(len(sched))]
    done = engine.generate(requests, concurrency=cap, schedule=sched.offsets)
    ok = [c for c in done if c.error is None]
    lag = np.array([c.client_lag for c in ok]) * 1e3
    send_lag = np.array([c.send_lag for c in ok]) * 1e3
    sent = np.array(sorted(c.sent for c in ok))
    achieved = (len(sent) - 1) / (sent[-1] - sent[0]) if len(sent) > 1 else 0.0
    scheduled = (len(sched) - 1) / sched.span_s if sched.span_s > 0 else 0.0
    return {
        "rate": rate,
        "requests": len(done),
        "errors": len(done) - len(ok),
        "scheduled_rate": scheduled,
        "achieved_rate": achieved,
        "lag_p50_ms": float(np.percentile(lag, 50)),
        "lag_p99_ms": float(np.percentile(lag, 99)),
        "lag_max_ms": float(lag.max()),
        "send_lag_p99_ms": float(np.percentile(send_lag, 99)),
        "on_time": bool(np.percentile(lag, 99) < on_time_ms and abs(achieved / scheduled - 1) < 0.05),
        "first_error": next((c.error for c in done if c.error is not None), None),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="50,100,200,400,800,1600")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--cap", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--server", choices=("process", "thread"), default="process")
    parser.add_argument("--on-time-ms", type=float, default=1.0)
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    url, _ = start_server(args.server)
    engine = OpenAIEngine(url, model="instant", timeout=30.0)
    engine.generate([Request(id=0, prompt=(1,), max_new_tokens=1)], concurrency=1)  # the server is up
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()}, server in a {args.server}, cap {args.cap}"
    )
    print(
        "| rate req/s | requests | errors | achieved send rate | client lag p50 / p99 / max ms "
        "| send lag p99 ms | on time |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for rate in (float(r) for r in args.rates.split(",")):
        row = one_rate(engine, rate, seconds=args.seconds, cap=args.cap, tokens=args.tokens, on_time_ms=args.on_time_ms)
        rows.append(row)
        print(
            f"| {rate:g} | {row['requests']} | {row['errors']} | {row['achieved_rate']:.1f} "
            f"(scheduled {row['scheduled_rate']:.1f}) | {row['lag_p50_ms']:.2f} / {row['lag_p99_ms']:.2f} / "
            f"{row['lag_max_ms']:.1f} | {row['send_lag_p99_ms']:.2f} | {'yes' if row['on_time'] else 'no'} |",
            flush=True,
        )
    on_time = [row["rate"] for row in rows if row["on_time"]]
    print(f"highest rate on time: {max(on_time):g} req/s" if on_time else "no rate on time")
    for row in rows:
        if row["first_error"]:
            print(f"rate {row['rate']:g}: first error: {row['first_error']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
