# The two commands a newcomer needs: `make run` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint install clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python -m pipelines
	@echo "The emmy command is in .venv/bin: run 'source .venv/bin/activate' to put it on your PATH (or type .venv/bin/emmy)."

# One worker per core, a test file's tests kept on one worker (module fixtures such as the in-process
# chain are built once), the files handed out in collection order, which starts the slowest files first
# (tests/conftest.py SLOWEST_FIRST; xdist would otherwise start the files with most tests first and end
# on a long file of few tests); every test is bounded so a hang fails the run instead of stalling it.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache
