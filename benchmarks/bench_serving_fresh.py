"""Is a fresh server's first window the slow one? Consecutive windows at one rate on one fresh server.

The serving search's 10-s holds run on fresh servers and held 64-74% of what the short points of their bisections
passed on a DeBERTa and a RoBERTa (session 43). If a fresh server's first seconds were slow (a runtime's first call
at each new shape, a cold allocator), its first window would read worst and later ones better. This starts the
recommended configuration the search's own way (``ServerProcess``, pinned to the search's server CPUs) and sends
``--windows`` consecutive windows of ``--seconds`` at ``--rate`` requests/s with the search's own client
(``loadgen.run_load``, pinned to the client CPUs) on the artifact's own traffic, each read by the search's
``rate_search.point_from``.

    python benchmarks/bench_serving_fresh.py /tmp/s43/fam/rob --rate 300 --seconds 5 --windows 6
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
    ap.add_argument("out", type=Path, help="a run directory with a serving section")
    ap.add_argument("--rate", type=float, required=True, help="requests per second")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--windows", type=int, default=5)
    args = ap.parse_args()

    run = served_run(args.out)
    s, rec, bodies = run.doc["serving"], run.rec, run.bodies
    server_cpus, client_cpus, server_args = run.server_cpus, run.client_cpus, run.server_args
    slo, q = run.slo_ms, run.percentile
    print(f"{args.out}: {rec['variant']} {rec['instances']}x{rec['threads']}, max batch {rec['max_batch']}, delay "
          f"{rec['max_delay_ms']:g} ms; {args.windows} x {args.seconds:g} s at {args.rate:g} requests/s, "
          f"{len(bodies)} distinct requests", flush=True)
    with ServerProcess(args.out / "artifact", server_args, cpus=server_cpus) as srv:
        for k in range(args.windows):
            with pinned(client_cpus):
                r = loadgen.run_load(srv.url, s["model_name"], bodies, poisson_offsets(args.rate, args.seconds, k),
                                     timeout_s=max(5.0, 20 * slo / 1000), seconds=args.seconds, rate=args.rate)
            p = point_from(r, rate=args.rate, seconds=args.seconds, slo_ms=slo, percentile=q)
            print(f"  window {k + 1}: p50 {p.p50_ms:.1f} ms, p{q:g} {p.p99_ms:.1f} ms, {p.kept} kept, "
                  f"{p.failed + p.timed_out + p.dropped} failed", flush=True)


if __name__ == "__main__":
    main()
