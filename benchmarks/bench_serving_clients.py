"""What the independent client adds, and what a window draws: autotune's load client against tritonclient on the
same server at the same rate, in alternating 30-s windows (issue 29's ±20% prediction check).

    python benchmarks/bench_serving_clients.py /tmp/serve-b6 --fraction 0.9 --pairs 4

The serving search predicts p50/p99 at 50% and 90% of the max rate from its own points (autotune's asyncio
client, ~1,500 requests each); bench_serving.py checks them against a 30-s tritonclient replay. A gap between the
two has three possible sources, and this benchmark tells them apart:

1. the client: tritonclient (greenlets, geventhttpclient) spends more CPU per request than autotune's client, and
   on a 2-core machine the client has one core: the paired ratio of the two clients' p99 in adjacent windows;
2. the window: a 30-s window against a ~1,500-request one (each 30-s window is also cut into sub-windows of
   that size: the median sub-window p99 against the whole window's);
3. the machine: window-to-window spread of the same client at the same rate.

The server is the artifact's own command (``run.sh serve``, pinned to the server CPUs the search used); each
client runs in a fresh process pinned to the client CPU, with the same Poisson schedule per pair (seeded), latency
from the intended send time. A 3-s tritonclient warm-up precedes the first window.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SUB_WINDOW = 1500  # requests: the serving search's curve point (CURVE_REQUESTS)


def _requests(a: dict[str, Any]) -> list[dict[str, np.ndarray]]:
    from autotune.serving.requests import cut_requests, load_batches

    return cut_requests(load_batches(Path(a["traffic"]), a["names"]), a["rows"], pad_values=a["pads"])


def client_triton(a: dict[str, Any]) -> list[float | None]:
    """tritonclient.http, a greenlet per request started at its intended time (triton_openloop.send_at)."""
    import tritonclient.http as httpclient
    from triton_openloop import _infer_inputs, poisson_offsets, send_at

    client = httpclient.InferenceServerClient(a["host"], concurrency=128, connection_timeout=30, network_timeout=30)
    prepared = [_infer_inputs(r) for r in _requests(a)]
    latency, _, _, _ = send_at(client, a["model"], prepared, poisson_offsets(a["rate"], a["seconds"], a["seed"]), 30)
    client.close()
    return [float(v) * 1000 if np.isfinite(v) else None for v in latency]


def client_autotune(a: dict[str, Any]) -> list[float | None]:
    """autotune's own open-loop client (serving.loadgen.run_load), as the search's points run it."""
    from triton_openloop import poisson_offsets

    from autotune.serving import loadgen

    bodies = [loadgen.encode_binary_request(r) for r in _requests(a)]
    offs = poisson_offsets(a["rate"], a["seconds"], a["seed"])
    r = loadgen.run_load("http://" + a["host"], a["model"], bodies, offs, timeout_s=30, seconds=a["seconds"],
                         rate=a["rate"])
    if r.ok != r.sent or r.dropped:  # latencies_ms holds the ok ones only: send order is kept only when all are
        raise SystemExit(f"autotune client: {r.ok} of {r.sent} ok, {r.dropped} dropped: {r.errors[:2]}")
    return [float(v) for v in r.latencies_ms]


def _window(pin: list[str], who: str, a: dict[str, Any]) -> np.ndarray:
    out = subprocess.run([*pin, sys.executable, __file__, "--client", who, json.dumps(a)], capture_output=True,
                         text=True, check=True).stdout
    return np.array([np.inf if v is None else v for v in json.loads(out.strip().splitlines()[-1])])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="a run directory with a serving section (bench_serving.py --out)")
    ap.add_argument("--fraction", type=float, default=0.9, help="of the recommendation's max rate")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--json", help="write the windows here")
    ap.add_argument("--client", choices=("triton", "autotune"), help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args.client:  # the child: one window, latencies (ms, send order) as a JSON list on the last line
        a = json.loads(rest[0] if rest else args.out)
        print(json.dumps(client_triton(a) if args.client == "triton" else client_autotune(a)))
        return
    from bench_serving import free_port, start_server, stop_server

    out = Path(args.out)
    doc = json.loads((out / "report.json").read_text())
    s = doc["serving"]
    rate = float(s["recommendation"]["max_rate"]) * args.fraction
    cpus = s.get("cpus") or {}
    pin = ["taskset", "-c", ",".join(map(str, cpus["client"]))] if cpus.get("client") else []
    port = free_port()
    proc = start_server(out / "artifact", port, cpus.get("server"))
    base = {"traffic": str(out / "artifact" / "traffic.npz"),
            "names": [i["name"] for i in doc["artifact"]["interface"]["inputs"]],
            "rows": int(s["request_samples"]), "pads": (doc["recipe"].get("data") or {}).get("pad_values") or {},
            "host": f"127.0.0.1:{port}", "model": s["model_name"], "rate": rate, "seconds": args.seconds}
    print(f"{out}: {s['recommendation']['variant']} at {args.fraction:.0%} of {rate / args.fraction:.1f} req/s = "
          f"{rate:.1f} req/s, {args.pairs} pairs of {args.seconds:.0f}-s windows, SLO {s['slo_ms']} ms", flush=True)
    windows: list[dict[str, Any]] = []
    try:
        _window(pin, "triton", dict(base, seconds=3.0, seed=99))  # warm the server
        for k in range(args.pairs):
            for who in (("autotune", "triton") if k % 2 == 0 else ("triton", "autotune")):
                lat = _window(pin, who, dict(base, seed=1000 + k))
                kept = lat[int(len(lat) * 0.1):]  # the first tenth left out, as both checks do
                subs = [float(np.percentile(c, 99)) for c in np.array_split(kept, max(1, len(kept) // SUB_WINDOW))]
                w = {"client": who, "pair": k, "requests": int(len(lat)), "p50_ms": float(np.percentile(kept, 50)),
                     "p99_ms": float(np.percentile(kept, 99)), "sub_p99_ms": subs}
                windows.append(w)
                print(f"  {who:8s} pair {k}: p50 {w['p50_ms']:.2f} ms, p99 {w['p99_ms']:.2f} ms; p99 of its "
                      f"~{SUB_WINDOW}-request sub-windows {', '.join(f'{x:.1f}' for x in subs)}", flush=True)
    finally:
        stop_server(proc)

    def of(who: str, key: str) -> list[float]:
        return [w[key] for w in windows if w["client"] == who]

    summary: dict[str, Any] = {"rate": rate, "fraction": args.fraction, "windows": windows}
    for who in ("autotune", "triton"):
        subs = [v for w in windows if w["client"] == who for v in w["sub_p99_ms"]]
        summary[who] = {"p99_median": float(np.median(of(who, "p99_ms"))),
                        "p50_median": float(np.median(of(who, "p50_ms"))),
                        "sub_p99_median": float(np.median(subs)), "sub_p99_p10": float(np.percentile(subs, 10)),
                        "sub_p99_p90": float(np.percentile(subs, 90))}
        print(f"{who}: {args.seconds:g}-s p99 median {summary[who]['p99_median']:.2f} ms "
              f"({', '.join(f'{x:.1f}' for x in of(who, 'p99_ms'))}), p50 median {summary[who]['p50_median']:.2f}; "
              f"sub-window p99 median {summary[who]['sub_p99_median']:.2f} "
              f"(p10-p90 {summary[who]['sub_p99_p10']:.1f}-{summary[who]['sub_p99_p90']:.1f})")
    ratios = [t / a for a, t in zip(of("autotune", "p99_ms"), of("triton", "p99_ms"), strict=True)]
    summary["p99_ratio_triton_over_autotune"] = ratios
    print(f"tritonclient / autotune p99, paired by window: {', '.join(f'{r:.2f}' for r in ratios)} "
          f"(median {np.median(ratios):.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
