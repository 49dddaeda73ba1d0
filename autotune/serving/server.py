"""The artifact's inference server (``python serve.py``): the Open Inference Protocol over HTTP/1.1, a dynamic
batcher, and ``--instances`` child processes that each run the artifact's ``load.py``.

Why our own and not Triton / TorchServe / Ray Serve: the artifact must be servable with what it already needs
(Python, numpy, its runtime), and the serving search must measure the server it recommends; the batching rule
is :mod:`batcher`'s, the one the search simulates. The same configuration is written for the big servers too
(:mod:`autotune.serving.configs`).

One asyncio process is the front end: a lean keep-alive HTTP/1.1 server (Content-Length bodies only,
TCP_NODELAY on every socket: Nagle plus delayed ACK would add 40 ms to small responses), requests checked
against the interface (:mod:`tensors`), queued in the :class:`batcher.Batcher` (``poll`` on every arrival and
every instance release, a timer at ``deadline()``), merged and padded into one batch, sent to a free instance
(:mod:`instances`), and split back. SIGTERM / SIGINT: stop accepting, answer what is queued or running (a few
seconds at most), stop the instances, exit 0.

``--calibrate``: no HTTP; the instances run calls of b rows back to back for each batch size (the saved traffic's
requests merged as this server merges them, else make_inputs(b)) and one JSON line of median service times and
their spread is printed (what the serving search predicts configurations from).

Standard library and numpy only; never imports autotune: it is copied into the artifact as ``serve.py`` beside
``batcher.py``, ``v2.py``, ``tensors.py`` and ``instances.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

try:
    from . import batcher, httpd, instances, tensors, v2
except ImportError:  # a flat file in the artifact: serve.py beside its siblings (SHIPPED)
    import batcher  # type: ignore[import-not-found,no-redef]
    import httpd  # type: ignore[import-not-found,no-redef]
    import instances  # type: ignore[import-not-found,no-redef]
    import tensors  # type: ignore[import-not-found,no-redef]
    import v2  # type: ignore[import-not-found,no-redef]

DRAIN_S = 5.0
#: The files the artifact carries, relative to this package: this one as serve.py, its siblings, and the merging of
#: requests it shares with the worker's validation (:mod:`autotune.core.merging`), all flat beside serve.py.
SHIPPED = ("server.py", "batcher.py", "httpd.py", "instances.py", "tensors.py", "v2.py", "../core/merging.py")


@dataclass(frozen=True)
class Options:
    host: str
    port: int
    artifact: str
    model_name: str
    instances: int
    threads: int
    max_batch: int | None
    max_delay_ms: float
    pad: Any
    dynamic_dims: dict[str, list[int]]
    timeout_s: float
    ready_file: str | None


class QueueTimeout(Exception):
    pass


class _Pending:
    __slots__ = ("future", "rows", "timer", "xs")

    def __init__(self, xs: list[np.ndarray], rows: int, future: asyncio.Future[Any]) -> None:
        self.xs, self.rows, self.future = xs, rows, future
        self.timer: asyncio.TimerHandle | None = None


def _by_shape(reqs: list[_Pending]) -> list[list[_Pending]]:
    """The requests grouped by their arrays' non-batch shapes, in order of arrival: each group one call, unpadded."""
    groups: dict[tuple[tuple[int, ...], ...], list[_Pending]] = {}
    for r in reqs:
        groups.setdefault(tuple(x.shape[1:] for x in r.xs), []).append(r)
    return list(groups.values())


class Server:
    """The front end: HTTP, the batcher, the instances."""

    def __init__(self, opts: Options, script: str) -> None:
        self.opts = opts
        self.instances = [instances.Instance(i, script, opts.artifact, opts.threads) for i in range(opts.instances)]
        self.iface: tensors.Interface | None = None
        self.unserved: list[str] = []  # output leaves no response carries ("cache (DynamicCache)")
        self.max_batch = 0
        # whether requests of different lengths may share one padded call (_check_merging), and why not
        self.merge_lengths = True
        self.merge_why: str | None = None
        # per output, the dims (0: the batch) whose size differed between the traffic's shortest and longest request
        self.output_dynamic_dims: dict[str, list[int]] = {}
        #: per output, the dims that follow the input's length (the merge check's short and long requests): the only
        #: ones a merged call's outputs are cut back in; None (unchecked): any dim of a padded length
        self.length_dims: list[list[int]] | None = None
        # whether two requests may share a call at all (_check_merging: an output that couples a call's rows), why
        # not, and per output the non-batch dims whose size followed the call's rows
        self.merge_requests = True
        self.merge_requests_why: str | None = None
        self.output_batch_dims: dict[str, list[int]] = {}
        self.warmed: dict[str, Any] = {}  # the warm-up before ready (_warm_shapes): calls, seconds, failures
        self.batcher: batcher.Batcher | None = None
        self.pending: dict[int, _Pending] = {}
        self.ids = itertools.count(1)
        self.tasks: set[asyncio.Task[None]] = set()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at: float | None = None
        self.batches: deque[tuple[int, float]] = deque(maxlen=10000)
        self.counts = {"ok": 0, "failed": 0, "rejected": 0, "timed_out": 0}
        self.stopping = False
        self.http = httpd.HttpServer(self._route, self._rejected)
        self.stop_event = asyncio.Event()

    @property
    def ready(self) -> bool:
        return self.batcher is not None and not self.stopping

    # ---- lifecycle ---------------------------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop_event.set)
        port = await self.http.start(self.opts.host, self.opts.port)
        _log(f"listening on http://{self.opts.host}:{port}, loading {self.opts.instances} instance(s)")
        code = 0
        try:
            starting = asyncio.ensure_future(asyncio.gather(*(inst.start() for inst in self.instances)))
            stop = asyncio.ensure_future(self.stop_event.wait())
            await asyncio.wait([starting, stop], return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                starting.cancel()
            elif starting.exception() is not None:
                _log(f"error: {starting.exception()}")
                code = 1
            else:
                info = starting.result()[0]
                self.unserved = [str(u) for u in info.get("unserved_outputs") or []]
                if self.unserved:
                    _log(f"outputs left out of the responses (not tensors, no v2 datatype): {', '.join(self.unserved)}")
                iface = tensors.Interface.from_info(info, self.opts.pad, self.opts.dynamic_dims)
                preparing = asyncio.ensure_future(self._prepare(iface))  # a SIGTERM meanwhile stops it
                await asyncio.wait([preparing, stop], return_when=asyncio.FIRST_COMPLETED)
                if not preparing.done():
                    preparing.cancel()
                else:
                    preparing.result()
                    self._ready_up(iface, port)
                    await stop
            stop.cancel()
        finally:
            await self._shutdown()
        return code

    async def _prepare(self, iface: tensors.Interface) -> None:
        """What runs between the instances' start and ready: the merge check, then the warm-up."""
        traffic = self._traffic()
        await self._check_merging(iface, traffic)
        await self._warm_shapes(iface, traffic)

    def _traffic(self) -> list[dict[str, np.ndarray]] | None:
        """The traffic saved in the artifact (``traffic.npz``), None where there is none or it cannot be read (the
        log says why: requests are then merged unchecked)."""
        path = os.path.join(self.opts.artifact, "traffic.npz")
        if not os.path.exists(path):
            return None
        try:
            return tensors.read_traffic(path)
        except (OSError, ValueError) as e:
            _log(f"the merge check could not read {path}: {e}; requests are merged")
            return None

    async def _warm_shapes(self, iface: tensors.Interface, traffic: list[dict[str, np.ndarray]] | None) -> None:
        """Before ready, every instance calls predict once at each call size the server can make up to its max
        batch, on the traffic's shortest request, and at a few sizes on its longest (:func:`tensors.warm_calls`;
        without a traffic, load.py's inputs at each size), so that the first requests do not pay what a new shape
        costs: a torch.compile artifact compiles again for a new batch size or length (a BART's 8-15 s each, and
        a fresh server's first requests then waited up to a second, session 38), OpenVINO takes 3x its call for a
        shape it has not seen. A call that fails here is logged; such requests will fail as they come."""
        t0 = time.monotonic()
        largest = (self.opts.max_batch or iface.batch_size or 1) if self.merge_requests else 1
        pad = {s.name: s.pad for s in iface.inputs}
        calls: list[Any] = []
        if traffic:
            try:
                calls = tensors.warm_calls(traffic, iface.names, pad, largest)
            except (KeyError, ValueError) as e:
                _log(f"the warm-up could not use the traffic: {e}")
        failed: list[str] = []

        async def warm(inst: instances.Instance) -> None:
            todo = calls or [("inputs", k) for k in tensors.warm_batches(largest)]
            for call in todo:
                shape = f"batch {call[1]}" if isinstance(call, tuple) else str([list(a.shape) for a in call])
                try:
                    await inst.call(await inst.call(call) if isinstance(call, tuple) else call)
                except instances.InstanceError as e:
                    failed.append(f"{shape}: {e}")

        await asyncio.gather(*(warm(inst) for inst in self.instances))
        self.warmed = {"calls": len(calls) or len(tensors.warm_batches(largest)),
                       "seconds": round(time.monotonic() - t0, 3), "failed": failed[:3]}
        _log(f"warmed up at {self.warmed['calls']} call shape(s), batch 1 to {largest}, in "
             f"{self.warmed['seconds']:.1f} s" + (f"; {len(failed)} failed, first: {failed[0]}" if failed else ""))

    async def _check_merging(self, iface: tensors.Interface, traffic: list[dict[str, np.ndarray]] | None) -> None:
        """Before the first request, on the traffic saved in the artifact: two requests of one shape, each alone
        and then merged into one call, must get the same answers, else no two requests share a call; then the
        traffic's shortest and longest request likewise, padded, else only requests of one length share a call
        (:func:`tensors.merge_disagrees`, ``_run``). The log and the ready file say why. Nothing to check where no
        call takes two rows (neither the artifact's batch nor ``--max-batch``) or the traffic is not in the artifact.

        Why both: padding is not the only way merging changes an answer. An output may couple a call's rows
        (transformers' CLIPModel: ``logits_per_image`` is ``(rows, rows)``), and merged requests then got a row
        of another request's scores, ``(1, 4)`` where alone it is ``(1, 1)`` (session 34)."""
        if max(self.opts.max_batch or 0, iface.batch_size or 1) < 2 or not traffic:
            return
        pads = [s.pad for s in iface.inputs]
        try:
            pad = {s.name: s.pad for s in iface.inputs}
            same = tensors.two_of_a_shape(traffic, iface.names, pad)
            calls = max(self.opts.max_batch or 0, iface.batch_size or 1)  # the most rows one call may take
            pair = tensors.merge_trial_requests(traffic, iface.names, pad, limit=min(4, calls)) \
                if any(s.dynamic for s in iface.inputs) else None
        except (ValueError, KeyError) as e:
            _log(f"the merge check could not use the traffic: {e}; requests are merged")
            return
        names = [o[0] for o in iface.outputs]
        if same is not None:
            tried = await self._merge_trial(same, pads, names, lengths=False)
            if tried is None:
                return
            solo, merged, why = tried
            self.output_batch_dims = {names[k]: dims for k, dims in tensors.batch_dims(solo, merged).items()
                                      if k < len(names) and dims}
            if why is not None:
                self.merge_requests, self.merge_requests_why = False, why
                _log(f"requests are served one per call: {why}")
                return
        if pair is not None:
            tried = await self._merge_trial(pair, pads, names, lengths=True)
            if tried is None:
                return
            solo, _, why = tried
            follow = tensors.following_dims(*solo)
            self.output_dynamic_dims = {name: dims for name, dims, a, b in zip(names, follow, solo[0], solo[-1],
                                                                               strict=False)
                                        if np.ndim(a) == np.ndim(b)}
            if why is None:
                self.length_dims = follow  # what the server's own merged calls cut back
            else:
                self.merge_lengths, self.merge_why = False, why
                _log(f"requests of different lengths are served in separate calls: {why}")

    async def _merge_trial(self, requests: Sequence[Sequence[Any]], pads: list[Any], names: list[str], *,
                           lengths: bool) -> tuple[list[list[Any]], list[Any], str | None] | None:
        """Each request alone, then all merged into one call on the first instance: the solo answers, the merged
        call's raw outputs (empty where it failed) and why merging changed an answer (None: it did not); None
        when a single request failed (nothing to compare: requests are merged, and the log says so)."""
        inst = self.instances[0]
        try:
            solo = []
            for r in requests:
                arrays, layout = tensors.combine([r], pads)
                solo.append(tensors.split(await inst.call(arrays), layout)[0])
        except instances.InstanceError as e:
            _log(f"the merge check's single requests failed ({e}); requests are merged")
            return None
        merged: list[Any] = []
        try:
            arrays, layout = tensors.combine(list(requests), pads)
            merged = list(await inst.call(arrays))
            follow = tensors.following_dims(*solo) if lengths else None
            why = tensors.merge_disagrees(solo, tensors.split(merged, layout, follow), lengths=lengths, names=names)
        except instances.InstanceError as e:
            why = f"the merged call failed: {e}"
        return solo, merged, why

    def _ready_up(self, iface: tensors.Interface, port: int) -> None:
        o = self.opts
        self.iface = iface
        self.max_batch = o.max_batch or self.iface.batch_size or 1
        # requests that cannot share a call go one per call, at once (a request's own rows are still one call)
        policy = batcher.BatchPolicy(self.max_batch, o.max_delay_ms / 1000.0) if self.merge_requests else \
            batcher.BatchPolicy(1, 0.0)
        self.batcher = batcher.Batcher(policy, len(self.instances))
        if o.ready_file:
            tmp = o.ready_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"port": port, "pid": os.getpid(), "merge_lengths": self.merge_lengths,
                           "merge_why": self.merge_why, "output_dynamic_dims": self.output_dynamic_dims,
                           "merge_requests": self.merge_requests, "merge_requests_why": self.merge_requests_why,
                           "output_batch_dims": self.output_batch_dims, "unserved_outputs": self.unserved,
                           "warmed": self.warmed}, f)
            os.replace(tmp, o.ready_file)
        _log(f"ready: model {o.model_name!r}, {o.instances} instance(s) x {o.threads} thread(s), max batch "
             f"{self.max_batch}, max delay {o.max_delay_ms} ms"
             + ("" if self.merge_requests else " (requests one per call)") + f", port {port}")

    async def _shutdown(self) -> None:
        self.stopping = True
        self.http.close()
        end = time.monotonic() + DRAIN_S
        while (self.pending or self.tasks) and time.monotonic() < end:
            await asyncio.sleep(0.01)
        for key in list(self.pending):
            self._expire(key, "the server is shutting down")
        await asyncio.gather(*(inst.stop() for inst in self.instances), return_exceptions=True)
        if self.opts.ready_file and os.path.exists(self.opts.ready_file):
            os.unlink(self.opts.ready_file)
        _log("stopped")

    # ---- batching ----------------------------------------------------------------------------------------

    def _pump(self) -> None:
        """Dispatch what the batcher says, and wake up at its next deadline."""
        assert self.batcher is not None
        loop = asyncio.get_running_loop()
        for d in self.batcher.poll(loop.time()):
            reqs = [p for p in (self.pending.pop(k, None) for k in d.requests) if p is not None]  # type: ignore[call-overload]
            task = loop.create_task(self._run(d.instance, reqs))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        deadline = self.batcher.deadline()
        if deadline != self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = loop.call_at(deadline, self._pump) if deadline is not None else None
            self.timer_at = deadline

    async def _run(self, index: int, reqs: list[_Pending]) -> None:
        assert self.batcher is not None and self.iface is not None
        inst = self.instances[index]
        alive = True
        try:
            for r in reqs:
                if r.timer is not None:
                    r.timer.cancel()
            reqs = [r for r in reqs if not r.future.done()]
            for group in (_by_shape(reqs) if not self.merge_lengths else [reqs] if reqs else []):
                t0 = time.perf_counter()
                arrays, layout = tensors.combine([r.xs for r in group], [s.pad for s in self.iface.inputs])
                outputs = await inst.call(arrays)
                self.batches.append((sum(layout.rows), time.perf_counter() - t0))
                for r, part in zip(group, tensors.split(outputs, layout, self.length_dims), strict=True):
                    if not r.future.done():
                        r.future.set_result(part)
        except Exception as e:
            for r in reqs:
                if not r.future.done():
                    r.future.set_exception(e if isinstance(e, instances.InstanceError)
                                           else instances.InstanceError(f"{type(e).__name__}: {e}"))
            alive = inst.proc is not None and inst.proc.returncode is None
        if not alive and not self.stopping:
            _log(f"instance {index} died; restarting it")
            try:
                await inst.start()
                alive = True
            except Exception as e:
                _log(f"error: instance {index} did not restart: {e}")
        if alive:
            self.batcher.release(index)
            self._pump()

    def _expire(self, key: int, why: str) -> None:
        p = self.pending.pop(key, None)
        if p is not None and not p.future.done():
            p.future.set_exception(QueueTimeout(why))

    async def _infer(self, headers: dict[str, str], body: bytes) -> tuple[int, bytes, dict[str, str]]:
        if not self.ready or self.iface is None or self.batcher is None:
            raise httpd.HttpError(503, "the model is not ready" + (" (shutting down)" if self.stopping else ""))
        length = headers.get("inference-header-content-length")
        try:
            header_length = int(length) if length is not None else None
        except ValueError:
            raise httpd.HttpError(400, f"Inference-Header-Content-Length is not an integer: {length!r}") from None
        try:
            req = v2.decode_infer_request(body, header_length)
            xs, rows = self.iface.check(req.inputs, self.max_batch)
            names = [o[0] for o in self.iface.outputs]
            unknown = [o for o in req.outputs or () if o not in names]
            if unknown:
                raise v2.ProtocolError(f"unknown output {unknown[0]!r}; the model has {names}")
        except v2.ProtocolError as e:
            raise httpd.HttpError(400, str(e)) from None
        loop = asyncio.get_running_loop()
        key = next(self.ids)
        p = self.pending[key] = _Pending(xs, rows, loop.create_future())
        p.timer = loop.call_later(self.opts.timeout_s, self._expire, key,
                                  f"the request waited more than {self.opts.timeout_s} s in the queue")
        self.batcher.add(key, loop.time(), rows)
        self._pump()
        try:
            outputs = await p.future
        except QueueTimeout as e:
            self.counts["timed_out"] += 1
            raise httpd.HttpError(503, str(e)) from None
        except instances.InstanceError as e:
            self.counts["failed"] += 1
            raise httpd.HttpError(500, f"predict failed: {e}") from None
        wanted = req.outputs or names
        named = [(n, o) for n, o in zip(names, outputs, strict=False) if n in wanted]
        try:
            data, extra = v2.encode_infer_response(self.opts.model_name, req.id, named, binary=req.binary_output)
        except v2.ProtocolError as e:
            self.counts["failed"] += 1
            raise httpd.HttpError(500, f"the model's output cannot be sent: {e}") from None
        self.counts["ok"] += 1
        return 200, data, extra

    # ---- HTTP --------------------------------------------------------------------------------------------

    def _rejected(self, status: int) -> None:
        if 400 <= status < 500:
            self.counts["rejected"] += 1

    async def _route(self, method: str, path: str, headers: dict[str, str],
                     body: bytes) -> tuple[int, bytes, dict[str, str]]:
        parts = [p for p in path.split("?", 1)[0].split("/") if p]
        if parts == ["v2"]:
            httpd.allow(method, "GET")
            return httpd.json_response({"name": "autotune", "version": "1", "extensions": ["binary_tensor_data"]})
        if parts == ["v2", "health", "live"]:
            httpd.allow(method, "GET")
            return 200, b"", {}
        if parts == ["v2", "health", "ready"]:
            httpd.allow(method, "GET")
            return (200, b"", {}) if self.ready else (503, httpd.error_body("not ready"), {})
        if len(parts) < 3 or parts[:2] != ["v2", "models"]:
            raise httpd.HttpError(404, f"no such path: {path}")
        if parts[2] != self.opts.model_name:
            raise httpd.HttpError(404, f"unknown model {parts[2]!r}; this server has {self.opts.model_name!r}")
        rest = parts[3:]
        if rest[:1] == ["versions"] and len(rest) >= 2:
            rest = rest[2:]
        if rest == []:
            httpd.allow(method, "GET")
            if self.iface is None:
                raise httpd.HttpError(503, "the model is not ready")
            return httpd.json_response(self.iface.metadata(self.opts.model_name, self.max_batch))
        if rest == ["ready"]:
            httpd.allow(method, "GET")
            return (200, b"", {}) if self.ready else (503, httpd.error_body("not ready"), {})
        if rest == ["infer"]:
            httpd.allow(method, "POST")
            return await self._infer(headers, body)
        if rest == ["stats"]:
            httpd.allow(method, "GET", "DELETE")
            doc = {"batches": [list(b) for b in self.batches], **self.counts}
            if method == "DELETE":
                self.batches.clear()
                self.counts = dict.fromkeys(self.counts, 0)
            return httpd.json_response(doc)
        raise httpd.HttpError(404, f"no such path: {path}")


def _log(message: str) -> None:
    print(f"serve.py: {message}", file=sys.stderr, flush=True)


# ---- the command line ---------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="serve.py", description="Serve the artifact's load.py over the Open Inference "
                                "Protocol (KServe v2, HTTP) with a dynamic batcher. Defaults from serving.json.")
    p.add_argument("--host")
    p.add_argument("--port", type=int, help="0: a free port (see --ready-file)")
    p.add_argument("--artifact", help="the directory with load.py (default: serve.py's)")
    p.add_argument("--model-name")
    p.add_argument("--instances", type=int)
    p.add_argument("--threads", type=int)
    p.add_argument("--max-batch", type=int, help="default: load.py's BATCH_SIZE")
    p.add_argument("--max-delay-ms", type=float)
    p.add_argument("--pad", help="pad values of dynamic dims: a number, a JSON list per input or object by name")
    p.add_argument("--timeout-s", type=float, help="a request queued longer gets 503")
    p.add_argument("--ready-file", help='written with {"port", "pid"} once the server is ready')
    p.add_argument("--instance", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--calibrate", action="store_true",
                   help="print one JSON line of per-batch-size service times (no server) and exit")
    p.add_argument("--batches", default="1,2,4,8", help="--calibrate's batch sizes")
    p.add_argument("--seconds", type=float, default=1.0, help="--calibrate's time per batch size")
    return p


def options(args: argparse.Namespace, here: str) -> Options:
    """The arguments with defaults from serving.json (beside serve.py, else in the artifact directory)."""
    artifact = os.path.abspath(args.artifact or here)
    conf: dict[str, Any] = {}
    for d in (here, artifact):
        path = os.path.join(d, "serving.json")
        if os.path.exists(path):
            with open(path) as f:
                conf = json.load(f)
            break

    def pick(name: str, fallback: Any) -> Any:
        value = getattr(args, name)
        return value if value is not None else conf.get(name, fallback)

    pad = json.loads(args.pad) if args.pad is not None else conf.get("pad_values", 0)
    return Options(host=pick("host", "127.0.0.1"), port=int(pick("port", 8000)), artifact=artifact,
                   model_name=str(pick("model_name", "model")), instances=int(pick("instances", 1)),
                   threads=int(pick("threads", 1)), max_batch=pick("max_batch", None),
                   max_delay_ms=float(pick("max_delay_ms", 0.0)), pad=pad,
                   dynamic_dims=dict(conf.get("dynamic_dims") or {}), timeout_s=float(pick("timeout_s", 60.0)),
                   ready_file=args.ready_file)


#: The most distinct calls of the traffic a calibration cycles through at one batch size (fewer where its time per
#: size has room for fewer, :func:`instances.calibrate`).
CALIBRATION_MIX = 32


def _calibration_mixes(opts: Options, info: Mapping[str, Any], batches: Sequence[int]
                       ) -> dict[int, list[list[np.ndarray]]]:
    """Per batch size, calls of the traffic saved in the artifact as this server would merge its requests
    (:func:`tensors.traffic_calls`); empty where the artifact has no traffic or it lacks an input (the calibration
    then times the instances' own inputs)."""
    path = os.path.join(opts.artifact, "traffic.npz")
    if not os.path.exists(path):
        return {}
    try:
        traffic = tensors.read_traffic(path)
        iface = tensors.Interface.from_info(info, opts.pad, opts.dynamic_dims)
        if not traffic or any(n not in traffic[0] for n in iface.names):
            return {}
        pad = {spec.name: spec.pad for spec in iface.inputs}
        return {b: tensors.traffic_calls(traffic, iface.names, pad, b, CALIBRATION_MIX) for b in batches}
    except (OSError, ValueError, KeyError) as e:
        _log(f"the calibration could not use the traffic ({e}): it times the instances' own inputs")
        return {}


async def _calibrate(opts: Options, script: str, batches: Sequence[int], seconds: float) -> int:
    insts = [instances.Instance(i, script, opts.artifact, opts.threads) for i in range(opts.instances)]
    try:
        await asyncio.gather(*(inst.start() for inst in insts))
        result = await instances.calibrate(insts, batches, seconds, _calibration_mixes(opts, insts[0].info, batches))
    except instances.InstanceError as e:
        _log(f"error: {e}")
        return 1
    finally:
        await asyncio.gather(*(inst.stop() for inst in insts), return_exceptions=True)
    print(json.dumps({"instances": opts.instances, "threads": opts.threads, **result}), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    script = os.path.abspath(__file__)
    if args.instance:
        return instances.child_main(args.artifact, args.threads or 1)
    try:
        opts = options(args, os.path.dirname(script))
        if opts.instances < 1 or opts.threads < 1 or (opts.max_batch is not None and opts.max_batch < 1):
            raise ValueError("--instances, --threads and --max-batch must be >= 1")
        batches = [int(b) for b in args.batches.split(",") if b.strip()]
    except (ValueError, OSError) as e:
        _log(f"error: {e}")
        return 2
    if args.calibrate:
        return asyncio.run(_calibrate(opts, script, batches, args.seconds))
    return asyncio.run(Server(opts, script).run())


if __name__ == "__main__":
    sys.exit(main())
