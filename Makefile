# runwatch — the two commands a new user needs are `make demo` and `make test`.
# Every target installs what it needs on a fresh machine (venv, Python deps,
# Kafka broker jars via Maven, Debian packages via apt-get).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RW := $(BIN)/runwatch
KAFKA_LIB := infra/kafka/lib
APT_PACKAGES := prometheus-alertmanager kcat chromium
PYTEST_ARGS ?=
# Test files run on this many pytest-xdist workers (each file on one worker, so a
# module's fixtures start once); 0 runs them in this process, one after another.
# Files are handed out in the session's order (tests/conftest.py: stack tiers first,
# unit files last), not xdist's largest-file-first, so the workers end together.
PYTEST_JOBS ?= 2
XDIST := -n $(PYTEST_JOBS) --dist loadfile --no-loadscope-reorder

.PHONY: deps venv jars apt up down status test unit packaging chaos lint demo bench bench-all clean

deps: venv jars apt

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,dev]'
	touch $@

jars: $(KAFKA_LIB)/.resolved

$(KAFKA_LIB)/.resolved: infra/kafka/pom.xml
	mvn -q -B -f infra/kafka/pom.xml dependency:copy-dependencies \
	    -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(KAFKA_LIB)
	touch $@

apt:
	@missing=""; for p in $(APT_PACKAGES); do \
	    dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

up: deps
	$(RW) stack up

down:
	@if [ -x $(RW) ]; then $(RW) stack down; else echo "nothing to stop (no venv)"; fi

status: venv
	$(RW) stack status

# The record classes are generated from schemas/avro; lint fails, naming the
# file, when they are stale (fix: $(RW) schemas generate, then commit).
lint: venv
	$(BIN)/ruff check services tests benchmarks
	$(BIN)/mypy
	$(RW) schemas generate --check

# The README's test command: lint, schema compatibility, then every test tier.
# Integration and e2e tests start the local stack through session fixtures
# (or use a running one) and fail, not skip, when it cannot start. The
# packaging tier (tests/packaging) builds the wheel and installs it base-only
# into a throwaway venv (pip needs the package registry or its cache).
test: deps lint
	$(RW) schemas check
	$(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

unit: venv
	$(BIN)/pytest $(XDIST) tests/unit tests/contract $(PYTEST_ARGS)

# The packaging tier alone (make test runs it with the rest): build the wheel,
# install it base-only into a throwaway venv, run an SDK job through the local
# broker, check the lean import and print the install's size.
packaging: venv
	$(BIN)/pytest tests/packaging -s $(PYTEST_ARGS)

# The chaos tier (docs/chaos.md): its own 3-broker stack (state .runwatch-chaos/, ports
# 39092-39294), the processor, sink and pager under SDK/agent load, one fault after another;
# about 7 minutes, so `make test` deselects it. Prints the table.
chaos: deps
	$(BIN)/pytest tests/chaos -m chaos -s $(PYTEST_ARGS)

demo: deps
	$(RW) stack up
	$(RW) demo

# The NAB corpus is not part of the repository: clone https://github.com/numenta/NAB
# (or any folder laid out as data/<set>/<name>.csv + labels/combined_windows.json)
# and pass its path: make bench NAB_DATA=path/to/NAB
NAB_DATA ?=
bench: deps
	@if [ -z "$(NAB_DATA)" ]; then echo "make bench needs the NAB corpus: make bench NAB_DATA=path/to/NAB (see docs/detectors.md)" >&2; exit 2; fi
	$(BIN)/runwatch bench nab --data $(NAB_DATA)

# Comparison SDKs live in their own venv so they never touch runwatch's pins.
BENCH_VENV := .runwatch/bench-venv
$(BENCH_VENV)/.installed:
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet mlflow-skinny==3.17.2 wandb==0.31.0 numpy
	touch $@

# Every benchmark in benchmarks/, each printing figures and ratios against a
# baseline measured in the same run, and each exiting non-zero when what it
# measured did not happen (records not delivered, rows missing, probes lost).
# The broker and store ones use the local stack (started here if it is down).
BENCH_KAFKA ?= 127.0.0.1:9092
bench-all: deps $(BENCH_VENV)/.installed up
	$(BIN)/python benchmarks/codec.py
	$(BIN)/python benchmarks/data_report.py
	$(BIN)/python benchmarks/retention.py
	$(BIN)/python benchmarks/store_insert.py
	$(BIN)/python benchmarks/sdk_overhead.py --bootstrap $(BENCH_KAFKA) --compare-python $(BENCH_VENV)/bin/python
	$(BIN)/python benchmarks/agent_overhead.py --bootstrap $(BENCH_KAFKA)
	$(BIN)/python benchmarks/processor.py --seconds 30 --broker $(BENCH_KAFKA)
	$(BIN)/python benchmarks/sink.py --bootstrap $(BENCH_KAFKA)
	@if [ -n "$(NAB_DATA)" ]; then $(BIN)/runwatch bench nab --data $(NAB_DATA); \
	else echo "skipping the NAB benchmark: set NAB_DATA=path/to/NAB (see docs/detectors.md)"; fi

clean: down
	rm -rf $(VENV) $(KAFKA_LIB) .runwatch .runwatch-chaos
