#!/usr/bin/env bash
# One prepared GPU session (the lent device machine: its image's python3 holds torch; nothing can be fetched
# there, so optuna and its needs travel as wheels in .whl, see the device README). Every step runs under the time
# left before DEADLINE seconds, writes its log under $OUT as it goes, and a step that fails does not stop the
# next one. Steps:
#   run       `autotune run recipes/quickstart.toml --device cuda`: the whole pipeline on a GPU (search, showdown,
#             artifact, the artifact check in a plain process); the run folder comes back as run.tar.gz without
#             the artifact's weights
#   load      the saved artifact's own load.py in a plain process
#   generate  `autotune run recipes/gpt2_generate.toml --device cuda`: generate() up to the concurrency boundary
#             under the recipe's memory budget as an allocator cap; the run folder comes back as gen.tar.gz
#   serve     benchmarks/bench_serving.py on benchmarks/recipes/quickstart_serving_cuda.toml: the run with its serving
#             stage on the GPU, then the artifact's `run.sh serve` under tritonclient at 50/90/130% of the reported
#             max rate (SERVE_SECONDS each, 15 by default; tritonclient in SERVE_CLIENTS processes, 4 by default:
#             one fell behind at 1,745 requests/s in session 47), against the naive baselines; serve.json and
#             serve.tar.gz (the run folder without weights) come back. tritonclient travels as wheels too.
#   memory    generate() of the GPT-2-shaped recipe's model at a few concurrencies under its 1.1 GiB cap, a fresh
#             process each: the peaks allocated and reserved (the boundary model reads the first, the cap bounds the
#             second); not in the default steps
#   pytest    `pytest -m cuda` (tests/test_cuda.py and the cuda tests of test_variants/test_environment; PYTEST_FILES
#             and PYTEST_K narrow it, PYTEST_TIMEOUT is each test's limit, 200 s by default)
# Each step is stopped with SIGINT at the deadline (pytest then still prints its summary with the failures so far;
# autotune keeps what it measured), SIGKILL 20 s later.
# Usage there: bash benchmarks/device_session.sh [DEADLINE_S] [steps...]; here, to try the steps on a CPU:
#   OUT=/tmp/dev SKIP_WHEELS=1 PY=.venv/bin/python DEVICE=cpu bash benchmarks/device_session.sh 300 run load
# Session 30 (an H200, 15 minutes in all): 450 s for run + load + generate (the generate step's boundary alone
# took 220 s then), then 320 s for pytest. Session 47: `serve pytest` (the non-boundary cuda tests) in 296 s, then
# three boundary cases in 378 s. Left for the next GPU session (BENCHMARKS, "Served on a GPU"):
#   SERVE_CLIENTS=4 bash benchmarks/device_session.sh 420 serve      # tritonclient on 4 cores at ~1,900 req/s
#   PYTEST_FILES=tests/test_cuda.py PYTEST_K="real_cuda_boundary and resnet18 and frozen" \
#     bash benchmarks/device_session.sh 200 pytest                   # the crash rule (SIGSEGV at batch 1257)
set -u
DEADLINE=${1:-480}
shift || true
STEPS=${*:-run load generate pytest}
START=$(date +%s)
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
case $PY in /*|python3) ;; *) PY=$PWD/$PY ;; esac
DEVICE=${DEVICE:-cuda}
left() { echo $((DEADLINE - ($(date +%s) - START))); }

[ -n "${SKIP_WHEELS:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheels did not install"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
{ nvidia-smi -L; nproc; $PY -c "import torch, optuna; print('torch', torch.__version__, torch.version.cuda,
  torch.cuda.get_device_name(0), 'optuna', optuna.__version__)"; } 2>&1 | tee "$OUT/env.log"

for step in $STEPS; do
  t=$(left); [ "$t" -gt 20 ] || { echo "no time left for $step"; break; }
  echo "=== $step ($t s left)"
  case $step in
    run)
      rm -rf /tmp/qs; timeout -s INT -k 20 "$((t - 10))" $PY -m autotune run recipes/quickstart.toml --device "$DEVICE" --out /tmp/qs \
        --time-budget "${RUN_BUDGET:-120}" --no-progress 2>&1 | tee "$OUT/run.log"
      tar czf "$OUT/run.tar.gz" -C /tmp --exclude='*.pt' --exclude='*.onnx' --exclude='*.bin' \
        --exclude='*.pt2' --exclude='*.so' qs 2>/dev/null ;;
    load)
      load=$(ls /tmp/qs/artifact/load.py 2>/dev/null) || { echo "no artifact"; continue; }
      (cd /tmp/qs/artifact && timeout -s INT -k 20 "$((t - 5))" $PY load.py && timeout -s INT -k 20 "$((t - 5))" $PY -c "
import time, torch, load
predict = load.load(); batch = load.make_inputs()
call = (lambda: predict(**batch)) if isinstance(batch, dict) else (lambda: predict(*batch))
sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
for _ in range(20): call()
sync(); n = 0; t0 = time.perf_counter()
while time.perf_counter() - t0 < 5: call(); n += 1
sync(); s = time.perf_counter() - t0
print(f'plain load.py: {n} calls in {s:.2f} s, {s / n * 1e3:.3f} ms per call, batch {load.BATCH_SIZE if hasattr(load, \"BATCH_SIZE\") else \"?\"}')
") 2>&1 | tee "$OUT/load.log" ;;
    generate)
      rm -rf /tmp/gen; timeout -s INT -k 20 "$((t - 10))" $PY -m autotune run recipes/gpt2_generate.toml --device "$DEVICE" \
        --out /tmp/gen --time-budget "${GEN_BUDGET:-120}" --no-progress 2>&1 | tee "$OUT/generate.log"
      tar czf "$OUT/gen.tar.gz" -C /tmp --exclude='*.pt' --exclude='*.bin' --exclude='*.safetensors' gen \
        2>/dev/null ;;
    serve)
      rm -rf /tmp/srv; timeout -s INT -k 20 "$((t - 10))" $PY benchmarks/bench_serving.py \
        "${SERVE_RECIPE:-benchmarks/recipes/quickstart_serving_cuda.toml}" --device "$DEVICE" --out /tmp/srv \
        --seconds "${SERVE_SECONDS:-15}" --client-processes "${SERVE_CLIENTS:-4}" --json "$OUT/serve.json" 2>&1 \
        | tee "$OUT/serve.log"
      tar czf "$OUT/serve.tar.gz" -C /tmp --exclude='*.pt' --exclude='*.onnx' --exclude='*.bin' \
        --exclude='*.pt2' --exclude='*.so' srv 2>/dev/null ;;
    memory)
      # the boundary's lead (BENCHMARKS, session 30): allocated against reserved peaks under the recipe's cap, each
      # concurrency a fresh process; the cap bounds reserved memory, the memory model reads allocated
      for c in ${MEMORY_CONCURRENCIES:-64 108 112 113 120}; do
        [ "$(left)" -gt 25 ] || break
        timeout -s INT -k 20 "$(( $(left) - 5 ))" $PY -c "
import sys, torch
sys.path.insert(0, 'recipes')
from models import gpt2_lm
dev = '$DEVICE'; c = $c; cap = int(1.1 * 2**30)
cuda = dev.startswith('cuda')
if cuda:
    torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(0).total_memory, 0)
model = gpt2_lm(hidden_size=256, layers=4, heads=4).to(dev)
ids = torch.randint(0, 50257, (c, 256), device=dev)
try:
    with torch.inference_mode():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, min_new_tokens=32,
                       do_sample=False, pad_token_id=0)
    fits = True
except torch.OutOfMemoryError as exc:
    fits = False
alloc = torch.cuda.max_memory_allocated() if cuda else 0
reserved = torch.cuda.max_memory_reserved() if cuda else 0
print(f'{c} sequences: fits {fits}, peak allocated {alloc / 2**20:.0f} MiB, peak reserved {reserved / 2**20:.0f} '
      f'MiB, cap {cap / 2**20:.0f} MiB')
" 2>&1 | grep -v Warning | tail -1 | tee -a "$OUT/memory.log"
      done ;;
    pytest)
      # PYTEST_FILES and PYTEST_K narrow it (session 32: the boundary cases first, their tracebacks kept)
      timeout -s INT -k 20 "$((t - 5))" $PY -m pytest -p no:cacheprovider -o addopts="" -m cuda -v -rA \
        --timeout "${PYTEST_TIMEOUT:-200}" --durations=15 ${PYTEST_K:+-k "$PYTEST_K"} \
        ${PYTEST_FILES:-tests/test_variants.py tests/test_environment.py tests/test_cuda.py} 2>&1 \
        | tee -a "$OUT/pytest.log" ;;
    *) echo "unknown step $step" ;;
  esac
done
echo "=== done in $(( $(date +%s) - START )) s"
