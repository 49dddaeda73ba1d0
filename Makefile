# autotune — set-up, demo, tests. Everything runs inside .venv, never the system Python.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The torch build this project is tested with; pinned so a fresh machine installs the same one.
TORCH_SPEC ?= torch==2.14.1 torchvision==0.29.1
DEMO_OUT ?= demo-out
PYTEST_ARGS ?=
# What `make install` installs: the project, editable, with every optional runtime its tests and recipes use.
# uv (a pip-compatible installer, docs.astral.sh/uv) installs them; pip only where uv cannot (no PyPI reachable, only a
# local index pip is configured for). On the 2-core machine a fresh install took 63 s with uv against 130 s with pip,
# the same 125 packages at the same versions, both compiling bytecode (issue 31: `.ci/run` within 10 minutes).
EXTRAS := .[dev,onnx,openvino,hf,quant]
# Headless Chromium (npm: @sparticuz/chromium + puppeteer-core) for tests/test_report_browser.py.
BROWSER_DIR := tests/browser
# The memory allocators autotune can search (search.environments; autotune/core/process_env.py).
ALLOCATOR_PACKAGES := libjemalloc2 libtcmalloc-minimal4

.PHONY: install allocators demo test test-fast test-slow lint bench clean

install: $(STAMP) allocators

# Debian's jemalloc and tcmalloc, for the process environments: installed when run as root with apt-get; otherwise
# it says how, and never fails (those environments are then "unavailable" with the same command).
allocators:
	@missing=""; for lib in libjemalloc.so.2 libtcmalloc_minimal.so.4; do \
		found=""; for d in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib; do \
			[ -e "$$d/$$lib" ] && found=1; done; [ -n "$$found" ] || missing="$$missing $$lib"; done; \
	if [ -z "$$missing" ]; then echo "make install: jemalloc and tcmalloc found"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get install -y -q $(ALLOCATOR_PACKAGES) >/dev/null || \
		 (apt-get update -q >/dev/null && apt-get install -y -q $(ALLOCATOR_PACKAGES) >/dev/null)) || \
		echo "make install: apt-get could not install $(ALLOCATOR_PACKAGES); those environments stay unavailable"; \
	else \
		echo "make install:$$missing not found; for the jemalloc/tcmalloc environments run" \
		     "'sudo apt-get install $(ALLOCATOR_PACKAGES)' (Debian/Ubuntu; other systems: jemalloc, gperftools)"; \
	fi

$(STAMP): pyproject.toml Makefile $(BROWSER_DIR)/package-lock.json
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q 'uv>=0.5' && $(VENV)/bin/uv pip install --python $(PY) --native-tls --compile-bytecode -q \
		$(TORCH_SPEC) -e '$(EXTRAS)' || { echo "make install: uv could not install; pip installs instead"; \
		$(PY) -m pip install -q --upgrade pip && $(PY) -m pip install -q $(TORCH_SPEC) && \
		$(PY) -m pip install -q -e '$(EXTRAS)'; }
	if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		cd $(BROWSER_DIR) && npm ci --no-audit --no-fund --loglevel=error; \
	else \
		echo "make install: node/npm not found: tests/test_report_browser.py will be skipped"; \
	fi
	touch $(STAMP)

demo: $(STAMP) allocators
	$(VENV)/bin/autotune run recipes/quickstart.toml --out $(DEMO_OUT)

# Two test processes (pytest-xdist; the machine has 2 cores and a serial run keeps about one busy: much of a test's
# time is its worker processes starting and timing); each module runs whole in one of them (`--dist loadfile`: its
# module-scoped fixtures, a real run or a server, are built once; longest modules first, tests/conftest.py
# LONGEST_FIRST; the run several modules read is shared through a file lock, tests/conftest.py).
# TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 2
test: $(STAMP) allocators
	$(PY) -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS)

# The pure-logic tests only (no worker or CLI processes, no slow ones): under 2 minutes, for the edit-test loop
# (1,322 tests: 2 min 56 s serially on the 2-core machine, 1 min 39 s in two processes). `make test` is unchanged:
# it still runs the worker tests.
test-fast: $(STAMP)
	AUTOTUNE_FUZZ_FAST_EXAMPLES=25 $(PY) -m pytest -m "not slow and not worker" \
		$(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS)

test-slow: $(STAMP) allocators
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check autotune tests benchmarks examples
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) benchmarks/bench_warmup.py
	$(PY) benchmarks/bench_batch.py
	$(PY) benchmarks/bench_variants.py --quick

clean:
	rm -rf $(VENV) $(DEMO_OUT) .pytest_cache .ruff_cache *.egg-info $(BROWSER_DIR)/node_modules
