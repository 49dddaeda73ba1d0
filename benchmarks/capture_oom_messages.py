"""Capture the exception types and messages of real CUDA out-of-memory failures (needs a GPU).

Each case runs in a child process of its own (a cuBLAS handle or a cap set by one case must not
leak into the next) and records what torch raised: the type name, whether it is a RuntimeError,
the message, and what ``autotune.worker.devices.oom_kind`` makes of it. The output is the test data of
tests/data/oom-messages.json (``--out``), which tests/test_devices.py checks on every machine.

Run: ``python benchmarks/capture_oom_messages.py --out tests/data/oom-messages.json``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = {
    "caching allocator, plain tensor": """
free, total = torch.cuda.mem_get_info()
torch.empty(int(total * 2), dtype=torch.uint8, device="cuda")
""",
    "caching allocator under a per-process cap, Linear forward": """
torch.cuda.set_per_process_memory_fraction(0.002)
m = torch.nn.Linear(4096, 4096).cuda()
with torch.inference_mode():
    m(torch.randn(65536, 4096, device="cuda"))
""",
    "TorchScript interpreter re-raise": """
class Alloc(torch.nn.Module):
    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return torch.empty(n, device=x.device) + x.sum()
s = torch.jit.script(Alloc())
free, total = torch.cuda.mem_get_info()
s(torch.ones(1, device="cuda"), int(total))
""",
    "frozen TorchScript module under a cap": """
m = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3), torch.nn.ReLU()).cuda().eval()
f = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.script(m)))
torch.cuda.set_per_process_memory_fraction(0.002)
with torch.inference_mode():
    f(torch.randn(4096, 3, 64, 64, device="cuda"))
""",
    "cuBLAS first matmul under a tiny cap": """
a = torch.randn(8, 8, device="cuda")
torch.cuda.set_per_process_memory_fraction(1e-6)
a @ a
""",
}

RUNNER = """
import json, sys, torch
sys.path.insert(0, {root!r})
from autotune.worker.devices import oom_kind
try:
{body}
    print(json.dumps({{"raised": False}}))
except BaseException as exc:
    print(json.dumps({{"raised": True, "type": type(exc).__name__, "runtime_error": isinstance(exc, RuntimeError),
                      "message": str(exc)[:2000], "oom_kind": oom_kind(exc)}}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None)
    args = p.parse_args()
    root = str(Path(__file__).resolve().parents[1])
    captured = []
    for what, body in CASES.items():
        code = RUNNER.format(root=root, body="\n".join("    " + ln for ln in body.strip().splitlines()))
        with tempfile.TemporaryDirectory() as tmp:  # a file: TorchScript needs the source of what it scripts
            script = Path(tmp) / "case.py"
            script.write_text(code)
            proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
        lines = proc.stdout.strip().splitlines()
        res = json.loads(lines[-1]) if lines else {"raised": None, "stderr": proc.stderr[-800:]}
        res["what"] = what
        print(json.dumps(res)[:400], flush=True)
        if res.get("raised"):
            captured.append({k: res[k] for k in ("what", "type", "runtime_error", "message", "oom_kind")})
    if args.out:
        Path(args.out).write_text(json.dumps(captured, indent=2) + "\n")


if __name__ == "__main__":
    main()
