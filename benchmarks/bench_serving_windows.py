"""What a curve point's window says about a longer one: the serving search's short load points against 30-s windows
at the same rate, on the same server, with the same client (issue 29's p99 prediction).

    python benchmarks/bench_serving_windows.py /tmp/serve-b --fraction 0.5 --rounds 2

The report's curve gives p50/p99 (with a 95% block-bootstrap CI) at 50%, 80% and 90% of the max rate, each from
one point of a few seconds (~1,000 requests). bench_serving.py checks them against a 30-s tritonclient replay, and
bench_serving_clients.py separates the client's cost from the window's. This one isolates the window: the server is
started the search's own way (``ServerProcess``, the recommended configuration, pinned to the search's server
CPUs), the client is the search's own (``loadgen.run_load`` in this process, pinned to the client CPUs), and every
window is read by the search's own ``rate_search.point_from`` (first tenth left out, the same bootstrap). Each
round: ``--short-count`` windows of the curve point's length, then one ``--long`` window, all at one rate.

Printed: each short window's p99 and CI; each long window's p99; the long p99 over the median short p99 (the bias
of a short window as a predictor); and how many short windows' CIs cover the long window's p99 of their round (what
the printed CI is worth as a prediction interval for a longer window).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> None:
    from served_run import served_run
    from triton_openloop import poisson_offsets

    from autotune.serving import loadgen
    from autotune.serving.processes import ServerProcess, pinned
    from autotune.serving.rate_search import point_from

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="a run directory with a serving section (bench_serving.py --out)")
    ap.add_argument("--fraction", type=float, default=0.5, help="of the recommendation's max rate")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--short", type=float, default=6.0, help="a short window's seconds (the curve point's length)")
    ap.add_argument("--short-count", type=int, default=4, help="short windows per round")
    ap.add_argument("--long", type=float, default=30.0, help="the long window's seconds")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    out = Path(args.out)
    run = served_run(out)
    s, rec, bodies = run.doc["serving"], run.rec, run.bodies
    rate = float(rec["max_rate"]) * args.fraction
    slo, q = run.slo_ms, run.percentile
    server_cpus, client_cpus, server_args = run.server_cpus, run.client_cpus, run.server_args
    print(f"{out}: {rec['variant']} {rec['instances']}x{rec['threads']}, max batch {rec['max_batch']}, delay "
          f"{rec['max_delay_ms']:g} ms; {args.fraction:.0%} of {rec['max_rate']:.1f} = {rate:.1f} req/s; per round "
          f"{args.short_count} x {args.short:g} s then {args.long:g} s", flush=True)

    def window(srv: ServerProcess, seconds: float, seed: int) -> dict[str, Any]:
        with pinned(client_cpus):
            r = loadgen.run_load(srv.url, s["model_name"], bodies, poisson_offsets(rate, seconds, seed),
                                 timeout_s=max(5.0, 20 * slo / 1000), seconds=seconds, rate=rate)
        p = point_from(r, rate=rate, seconds=seconds, slo_ms=slo, percentile=q)
        return {"seconds": seconds, "kept": p.kept, "p50_ms": p.p50_ms, "p99_ms": p.p99_ms,
                "p99_ci_ms": list(p.p99_ci_ms), "failed": p.failed + p.timed_out + p.dropped}

    rounds: list[dict[str, Any]] = []
    with ServerProcess(out / "artifact", server_args, cpus=server_cpus) as srv:
        window(srv, 2.0, 7)  # untimed, as the search warms a fresh server
        for k in range(args.rounds):
            shorts = [window(srv, args.short, 1000 * k + i) for i in range(args.short_count)]
            long = window(srv, args.long, 1000 * k + 999)
            for w in shorts:
                print(f"  round {k} short: p50 {w['p50_ms']:.2f} ms, p99 {w['p99_ms']:.2f} "
                      f"(CI {w['p99_ci_ms'][0]:.1f}-{w['p99_ci_ms'][1]:.1f}), {w['kept']} kept", flush=True)
            print(f"  round {k} long:  p50 {long['p50_ms']:.2f} ms, p99 {long['p99_ms']:.2f}, {long['kept']} kept",
                  flush=True)
            rounds.append({"short": shorts, "long": long})

    shorts_p99 = [w["p99_ms"] for r in rounds for w in r["short"]]
    covered = sum(w["p99_ci_ms"][0] <= r["long"]["p99_ms"] <= w["p99_ci_ms"][1] for r in rounds for w in r["short"])
    ratios = [r["long"]["p99_ms"] / float(np.median([w["p99_ms"] for w in r["short"]])) for r in rounds]
    within = sum(abs(w["p99_ms"] / r["long"]["p99_ms"] - 1) <= 0.2 for r in rounds for w in r["short"])
    summary = {"rate": rate, "fraction": args.fraction, "rounds": rounds,
               "short_p99_median": float(np.median(shorts_p99)),
               "short_p99_p10_p90": [float(np.percentile(shorts_p99, 10)), float(np.percentile(shorts_p99, 90))],
               "long_p99": [r["long"]["p99_ms"] for r in rounds], "long_over_short_median": ratios,
               "short_ci_covers_long": covered, "short_within_20pct_of_long": within, "short_windows": len(shorts_p99)}
    print(f"short p99 median {summary['short_p99_median']:.2f} ms (p10-p90 {summary['short_p99_p10_p90'][0]:.1f}-"
          f"{summary['short_p99_p10_p90'][1]:.1f}); long p99 {', '.join(f'{x:.2f}' for x in summary['long_p99'])}; "
          f"long / median short {', '.join(f'{x:.2f}' for x in ratios)}")
    print(f"short windows whose CI covers their round's long p99: {covered} of {len(shorts_p99)}; "
          f"within +-20% of it: {within} of {len(shorts_p99)}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
