"""The server's instances: child processes that each load the artifact's ``load.py`` once and run batches.

Why processes: one Python process runs one forward at a time (the GIL, and the runtimes' own pools), so
``--instances N`` copies of the model serve N batches at once, each with ``--threads T``: the
instances x threads split of the cores is the serving search's main knob.

The front end (``serve.py``) talks to each child over its stdin/stdout with length-prefixed pickled frames
(protocol 5): request ``(call_id, [arrays in INPUTS order])`` -> reply ``(call_id, [output arrays])`` or
``(call_id, "error text")``. The first frame a child sends is ``(0, info)`` once ``load()`` returned and one
warm-up call ran (``info``: the interface load.py declares and the outputs' dtypes and shapes), or
``(0, "error text")``. A child exits on EOF on stdin, and dies with the front end (``PR_SET_PDEATHSIG``), so no
instance outlives the server. The child's own stdout is redirected to stderr, so a model that prints cannot
corrupt the frames.

Standard library and numpy only (torch only where load.py imports it): copied beside ``serve.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import pickle
import signal
import struct
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

try:
    from . import tensors
except ImportError:  # a flat file in the artifact, beside its siblings
    import tensors  # type: ignore[import-not-found,no-redef]

_LEN = struct.Struct("<Q")
PARENT_ENV = "AUTOTUNE_SERVE_PARENT"


class InstanceError(RuntimeError):
    """An instance answered a call with an error (predict raised), or died."""


def write_frame(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=5)
    stream.write(_LEN.pack(len(data)))
    stream.write(data)
    stream.flush()


def read_frame(stream: BinaryIO) -> Any:
    """The next frame's object; raises EOFError at the end of the stream."""
    head = stream.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError
    size = _LEN.unpack(head)[0]
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


# ---- the child ----------------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    parent = int(os.environ.get(PARENT_ENV) or 0)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if parent and os.getppid() != parent:  # the parent died before prctl
        os._exit(0)


def load_artifact(artifact: str, threads: int) -> Any:
    """load.py imported as a module, with the instance's thread count set where load.py takes one."""
    path = os.path.join(artifact, "load.py")
    sys.path.insert(0, os.path.abspath(artifact))
    spec = importlib.util.spec_from_file_location("load", path)
    if spec is None or spec.loader is None:
        raise InstanceError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["load"] = module
    spec.loader.exec_module(module)
    if hasattr(module, "THREADS"):
        setattr(module, "THREADS", threads)  # noqa: B010 - load.py's module constant
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    config = getattr(module, "CONFIG", None)
    if isinstance(config, dict):
        config["INFERENCE_NUM_THREADS"] = threads
    return module


def _leaves(out: Any) -> list[Any]:
    """The output's tensors in pytree order (a dict's / ModelOutput's values, tuples and lists in order)."""
    if out is None:
        return []
    if isinstance(out, Mapping):
        return [t for v in out.values() for t in _leaves(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _leaves(v)]
    return [out]


def _numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        t = x.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()  # numpy has no bfloat16
        return np.asarray(t.numpy())
    return np.asarray(x)


#: numpy kinds a v2 tensor carries (BOOL, INT*, UINT*, FP*): an output leaf of another kind is not served.
SERVED_KINDS = "biuf"


def _served(leaves: Sequence[Any]) -> dict[int, np.ndarray]:
    """The output leaves a response can carry, by index, as numpy arrays.

    Why: a model's output may hold more than tensors. transformers' GPT2LMHeadModel returns its ``past_key_values``
    as a ``DynamicCache`` object beside the logits (``use_cache`` is on by default), which no v2 datatype carries:
    every request of a served GPT-2 failed with "numpy dtype object has no v2 datatype", even the metadata. Such
    leaves are left out of the responses (the log and the ready file say which); the tensors are served."""
    served = {}
    for i, leaf in enumerate(leaves):
        try:
            array = _numpy(leaf)
        except Exception:  # an object numpy cannot take at all
            continue
        if array.dtype.kind in SERVED_KINDS:
            served[i] = array
    return served


def _call(module: Any, predict: Any, xs: Sequence[Any], keep: Sequence[int] | None = None) -> list[np.ndarray]:
    """predict on arrays in INPUTS order, in the form load.py's predict takes; the outputs as numpy arrays (those at
    ``keep`` only, when given: the leaves a response carries, :func:`_served`).

    A call may have fewer leaves than the artifact's sample: a model that returns one entry per row (torchvision's
    detectors, a dict of boxes, scores and labels per image) has three leaves for one image where its sample of two
    had six, and the leaves come image by image, so they are the first of the sample's names. (Indexing past them
    failed every one-image request and the serving search's calibration of an SSDlite artifact of batch 2 with
    "IndexError: list index out of range", session 37.)"""
    leaves = _call_leaves(module, predict, xs)
    if keep is None:
        return [_numpy(o) for o in leaves]
    return [_numpy(leaves[i]) for i in keep if i < len(leaves)]


def _call_leaves(module: Any, predict: Any, xs: Sequence[Any]) -> list[Any]:
    """predict's output leaves as it returns them (tensors, arrays, or other objects)."""
    form_of = getattr(module, "_form", None)
    if form_of is None:
        n = int(getattr(module, "N_POSITIONAL", len(xs)))
        out = predict(*xs[:n], **dict(zip(module.INPUTS[n:], xs[n:], strict=True)))
    else:
        form = form_of(list(xs))
        if isinstance(form, dict):
            out = predict(**form)
        elif isinstance(form, tuple) and len(form) == 2 and isinstance(form[0], tuple) and isinstance(form[1], dict):
            out = predict(*form[0], **form[1])
        elif isinstance(form, (tuple, list)):
            out = predict(*form)
        else:
            out = predict(form)
    return _leaves(out)


def _flat_inputs(module: Any, form: Any) -> list[np.ndarray]:
    """make_inputs' batch (predict's form) as numpy arrays in INPUTS order."""
    names = list(module.INPUTS)
    n = int(getattr(module, "N_POSITIONAL", len(names)))
    if isinstance(form, dict):
        xs = [form[k] for k in names]
    elif isinstance(form, tuple) and len(form) == 2 and isinstance(form[0], tuple) and isinstance(form[1], dict):
        xs = [*form[0], *(form[1][k] for k in names[n:])]
    elif isinstance(form, (tuple, list)):
        xs = list(form)
    else:
        xs = [form]
    return [_numpy(x) for x in xs]


def sample_inputs(sample: Sequence[Any], rows: int | None, seed: int = 0) -> list[np.ndarray]:
    """Random arrays like load.py's SAMPLE (dtype, shape, integer range) with ``rows`` rows (None: SAMPLE's)."""
    rng = np.random.default_rng(seed)
    xs = []
    for dtype, shape, bounds in sample:
        shape = [rows or shape[0], *shape[1:]]
        if bounds is not None:
            xs.append(rng.integers(bounds[0], bounds[1], shape).astype(dtype))
        elif dtype == "bool":
            xs.append(rng.random(shape) < 0.5)
        else:
            xs.append(rng.standard_normal(shape).astype(dtype if dtype in ("float16", "float64") else "float32"))
    return xs


def traffic_inputs(artifact: str, names: Sequence[str], rows: int | None) -> list[np.ndarray] | None:
    """The first batch of the traffic saved in the artifact (``traffic.npz``), its rows cut or repeated to ``rows``
    (None: as saved, :func:`with_rows`), in ``names``' order; None where the artifact has no traffic or it lacks an
    input.

    Why: random inputs are not inputs every model takes. A BART classifier needs an <eos> in every row, and its
    served artifact failed to start on the random warm-up call ("Each example must contain at least one <eos>
    token", session 38); the user's own traffic is what the server will be sent."""
    path = os.path.join(artifact, "traffic.npz")
    if not os.path.exists(path):
        return None
    try:
        batches = tensors.read_traffic(path)
    except (OSError, ValueError):
        return None
    if not batches or any(n not in batches[0] for n in names):
        return None
    return with_rows([batches[0][n] for n in names], rows)


def with_rows(xs: Sequence[np.ndarray], rows: int | None) -> list[np.ndarray]:
    """``xs`` (one batch, dim 0 its rows) with its rows cut or repeated in turn to ``rows`` (None: as they are)."""
    have = int(xs[0].shape[0])
    index = np.arange(rows or have) % have
    return [np.ascontiguousarray(x[index]) for x in xs]


def _dynamic_dims(module: Any) -> list[list[int]]:
    """Per input, the non-batch dims that vary (load.py's DYNAMIC_DIMS, list or dict, and its PAD_DIMS)."""
    names = list(module.INPUTS)
    dims: list[set[int]] = [set() for _ in names]
    declared = getattr(module, "DYNAMIC_DIMS", None)
    if isinstance(declared, Mapping):
        declared = [declared.get(n, []) for n in names]
    for source in (declared, getattr(module, "PAD_DIMS", None)):
        if isinstance(source, (list, tuple)) and len(source) == len(names):
            for i, ds in enumerate(source):
                dims[i].update(int(d) for d in ds or [] if int(d) > 0)
    return [sorted(d) for d in dims]


def child_main(artifact: str, threads: int) -> int:
    """An instance: load, warm up, announce, then answer frames until EOF on stdin."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the front end drains first
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the model's prints go to stderr, not into the frames
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    try:
        module = load_artifact(artifact, threads)
        predict = module.load()
        sample = [(str(d), [int(s) for s in shape], list(b) if b else None) for d, shape, b in module.SAMPLE]
        traffic = traffic_inputs(artifact, [str(n) for n in module.INPUTS], None)  # read once: calibration too
        leaves = _call_leaves(module, predict, traffic if traffic is not None else sample_inputs(sample, None))
        served = _served(leaves)
        keep, warm = list(served), list(served.values())
        names = [str(o) for o in getattr(module, "OUTPUTS", None) or []]
        if len(names) != len(leaves):
            names = [f"output{i}" for i in range(len(leaves))]
        unserved = [f"{names[i]} ({type(leaf).__name__})" for i, leaf in enumerate(leaves) if i not in keep]
        info = {"pid": os.getpid(), "inputs": [str(n) for n in module.INPUTS], "sample": sample,
                "batch_size": int(getattr(module, "BATCH_SIZE", 0) or sample[0][1][0]),
                "outputs": [names[i] for i in keep], "unserved_outputs": unserved,
                "output_specs": [(str(o.dtype), list(o.shape)) for o in warm], "dynamic": _dynamic_dims(module)}
    except BaseException as e:
        write_frame(out, (0, f"loading {artifact}/load.py failed: {type(e).__name__}: {e}"))
        return 1
    write_frame(out, (0, info))
    while True:
        try:
            call_id, payload = read_frame(inp)
        except EOFError:
            return 0
        try:
            if isinstance(payload, tuple) and payload[0] == "inputs":  # calibration: the traffic's rows, b of them
                make = getattr(module, "make_inputs", None)
                reply: Any = (with_rows(traffic, payload[1]) if traffic is not None
                              else _flat_inputs(module, make(payload[1])) if make is not None
                              else sample_inputs(sample, payload[1]))
            else:
                reply = _call(module, predict, payload, keep)
        except Exception as e:
            reply = f"{type(e).__name__}: {e}"
        write_frame(out, (call_id, reply))


# ---- the front end's handle -------------------------------------------------------------------------------


class Instance:
    """One child process as the front end sees it: ``start``, then one ``call`` at a time, ``stop``."""

    def __init__(self, index: int, script: str, artifact: str, threads: int) -> None:
        self.index = index
        self.argv = [sys.executable, script, "--instance", "--artifact", artifact, "--threads", str(threads)]
        self.env = {**os.environ, PARENT_ENV: str(os.getpid()), "OMP_NUM_THREADS": str(threads),
                    "MKL_NUM_THREADS": str(threads)}
        self.proc: asyncio.subprocess.Process | None = None
        self.info: dict[str, Any] = {}
        self._calls = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> dict[str, Any]:
        """Start the child and wait for its announcement (InstanceError when loading failed)."""
        self.proc = await asyncio.create_subprocess_exec(*self.argv, stdin=asyncio.subprocess.PIPE,
                                                         stdout=asyncio.subprocess.PIPE, env=self.env)
        _, info = await self._read()
        if not isinstance(info, dict):
            raise InstanceError(f"instance {self.index}: {info}")
        self.info = info
        return info

    async def _read(self) -> Any:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            head = await self.proc.stdout.readexactly(_LEN.size)
            data = await self.proc.stdout.readexactly(_LEN.unpack(head)[0])
        except (asyncio.IncompleteReadError, ConnectionError):
            code = await self.proc.wait()
            raise InstanceError(f"instance {self.index} (pid {self.proc.pid}) exited with {code}") from None
        return pickle.loads(data)

    async def call(self, payload: Any) -> Any:
        """One batch (arrays in INPUTS order) -> its outputs; InstanceError if predict failed or the child died."""
        assert self.proc is not None and self.proc.stdin is not None
        self._calls += 1
        data = pickle.dumps((self._calls, payload), protocol=5)
        try:
            self.proc.stdin.write(_LEN.pack(len(data)))
            self.proc.stdin.write(data)
            await self.proc.stdin.drain()
        except (ConnectionError, RuntimeError):
            code = await self.proc.wait()
            raise InstanceError(f"instance {self.index} (pid {self.proc.pid}) exited with {code}") from None
        _, reply = await self._read()
        if isinstance(reply, str):
            raise InstanceError(reply)
        return reply

    async def stop(self, timeout: float = 3.0) -> None:
        """EOF on the child's stdin, then SIGKILL if it has not exited within ``timeout``."""
        if self.proc is None or self.proc.returncode is not None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


async def calibrate(instances: Sequence[Instance], batches: Sequence[int], seconds: float,
                    mixes: Mapping[int, Sequence[list[np.ndarray]]] | None = None) -> dict[str, Any]:
    """Per batch size, every instance calls predict on b rows back to back for ``seconds`` at once (as in the server,
    through the frames): on ``mixes[b]`` where given (the traffic's requests merged into calls as the server merges
    them, :func:`tensors.traffic_calls`), each instance from its own place in it and as many of them as ``seconds``
    has room for, each seen once first (a runtime's first call at a new shape is the slow one); else on the
    traffic's first batch cut to b rows (:func:`traffic_inputs`; else make_inputs(b)), repeated. The median call and
    the p90/p50 spread of all calls, and how many distinct calls each size had (``mix``).

    Why the mix: the service times feed the simulation that prunes and ranks the serving grid, and one repeated
    shape's median and spread are not the traffic's (a DETR's requests of 160-256 px a side: p90/p50 1.04 on one
    image, session 46; a sentence of the first batch's longest width stood for every request of 20-128 tokens)."""
    service: dict[str, float] = {}
    spread: dict[str, float] = {}
    counts: dict[str, int] = {}
    kinds: dict[str, int] = {}
    for b in batches:
        mix = list((mixes or {}).get(b) or [])
        if mix:
            t0 = time.perf_counter()
            await asyncio.gather(*(inst.call(mix[0]) for inst in instances))  # warm-up, and what a call takes
            took = time.perf_counter() - t0
            mix = mix[:max(min(2, len(mix)), min(len(mix), int(seconds / max(2 * took, 1e-6))))]

            async def warm(inst: Instance, xs: list[list[np.ndarray]]) -> None:
                for x in xs:
                    await inst.call(x)

            await asyncio.gather(*(warm(inst, mix[1:]) for inst in instances))
            inputs = [[mix[(i + j) % len(mix)] for j in range(len(mix))] for i in range(len(instances))]
        else:
            first = await asyncio.gather(*(inst.call(("inputs", b)) for inst in instances))
            await asyncio.gather(*(inst.call(x) for inst, x in zip(instances, first, strict=True)))  # warm-up
            inputs = [[x] for x in first]

        async def loop(inst: Instance, xs: list[list[np.ndarray]], end: float, times: list[float]) -> None:
            k = 0
            while True:
                t0 = time.perf_counter()
                await inst.call(xs[k % len(xs)])
                t1 = time.perf_counter()
                times.append(t1 - t0)
                k += 1
                if t1 >= end:
                    return

        times: list[float] = []
        end = time.perf_counter() + seconds
        await asyncio.gather(*(loop(inst, x, end, times) for inst, x in zip(instances, inputs, strict=True)))
        p50, p90 = (float(v) for v in np.percentile(times, [50, 90]))
        service[str(b)], spread[str(b)], counts[str(b)] = p50, p90 / p50 if p50 > 0 else 1.0, len(times)
        kinds[str(b)] = len(inputs[0])
    return {"service_s": service, "spread": spread, "calls": counts, "mix": kinds}


__all__ = ["Instance", "InstanceError", "calibrate", "child_main", "read_frame", "sample_inputs", "write_frame"]
