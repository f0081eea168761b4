# reignpipe: `make demo` runs the main job, `make test` runs the test suite. Both fetch what
# they need (ONNX Runtime + GN models from Maven Central, Python oracles from PyPI) into
# $(REIGNPIPE_HOME), outside the repository.
SHELL := /bin/bash
REIGNPIPE_HOME ?= $(HOME)/.cache/reignpipe
export REIGNPIPE_HOME
VENV := $(REIGNPIPE_HOME)/venv
PY := $(VENV)/bin/python
# The REIGN trainer (ops/train) has its own venv: the PyPI torch wheel brings several GB of CUDA
# packages that the test oracles do not need (ops/train/install-venv says what it leaves out).
# `reignpipe train` looks for it there by default.
TRAIN_VENV := $(REIGNPIPE_HOME)/venv-train
TRAIN_PY := $(TRAIN_VENV)/bin/python
# The peer benchmark (ops/bench/peers) has its own venv too: sentence-transformers, fastembed
# and torch are what users run instead of reignpipe, not anything the tests need.
PEERS_VENV := $(REIGNPIPE_HOME)/venv-peers
PEERS_PY := $(PEERS_VENV)/bin/python
GO ?= go
# Packages with concurrency worth running under the race detector.
RACE_PKGS := ./pipelines/engine/runner/ ./pipelines/engine/cluster/ ./stages/gn/ ./stages/shardcache/ ./connectors/vectorfile/ \
	./connectors/watchdir/ ./connectors/kafka/ ./internal/kafkaclient/ ./internal/kafkaclient/offsets/ ./connectors/pgvector/ ./pipelines/serving/serve/

.PHONY: all build fetch fetch-gpu bench-gpu gn-optimized gn-int8 gn-int8r kafka kafka-connect postgres s3proxy tools pydeps train-deps demo test test-go test-unshared fuzz-smoke fuzz bench bench-peers clean

all: build

build:
	$(GO) build -o bin/reignpipe ./cmd/reignpipe

fetch:
	@ops/fetch >/dev/null

# The GPU (CUDA 12) build of ONNX Runtime for gn.provider cuda:N, into REIGNPIPE_HOME/ort-gpu.
fetch-gpu:
	@ops/fetch --gpu >/dev/null

# The Apache Kafka broker the Kafka tests run against (jars from Maven Central).
kafka:
	@ops/kafka fetch >/dev/null

# Kafka Connect (the runtime of the Kafka above) with Debezium's PostgreSQL connector plugin, the
# change-data-capture path the Debezium tests run against.
kafka-connect: kafka
	@ops/kafka-connect fetch >/dev/null

# PostgreSQL 15 with pgvector, the vector store the database tests run against: Debian's packages
# unpacked into $(REIGNPIPE_HOME)/postgres without a system install, pgvector built from source.
postgres:
	@ops/postgres fetch >/dev/null

# s3proxy, the S3 API server the object-storage tests run against (a jar from Maven Central).
s3proxy:
	@ops/s3proxy fetch >/dev/null

# Command-line tools the tests use beside our own code (kcat), unpacked from Debian packages into
# $(REIGNPIPE_HOME)/tools without root; the tests look there before PATH.
tools:
	@ops/tools >/dev/null

$(PY): ops/requirements-test.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r ops/requirements-test.txt
	@touch $(PY)

pydeps: $(PY)

$(TRAIN_PY): ops/train/requirements.txt ops/train/install-venv
	ops/train/install-venv $(TRAIN_VENV)
	@touch $(TRAIN_PY)

train-deps: $(TRAIN_PY)

demo: fetch build
	ops/demo

# REIGNPIPE_STRICT=1: a test that needs a fetched model, a Python oracle, the Kafka broker or PostgreSQL
# fails instead of skipping, so nothing passes by not running. Tests on ../shared/data still skip
# without it. ops/with-kafka starts the broker for the Go tests (REIGNPIPE_KAFKA_BROKERS,
# REIGNPIPE_KAFKA_CTL) and ops/with-postgres the PostgreSQL server (REIGNPIPE_PG_DSN,
# REIGNPIPE_PG_CTL), ops/with-kafka-connect the Kafka Connect worker with Debezium
# (REIGNPIPE_CONNECT_URL, REIGNPIPE_CONNECT_CTL), ops/with-s3proxy the S3 server
# (REIGNPIPE_S3_ENDPOINT, REIGNPIPE_S3_CTL), and each stops its server afterwards, also when they
# fail.
test: fetch pydeps train-deps gn-int8r kafka kafka-connect postgres s3proxy tools
	ops/with-kafka ops/with-postgres ops/with-kafka-connect ops/with-s3proxy $(MAKE) --no-print-directory test-go
	$(MAKE) --no-print-directory fuzz-smoke

# The packages whose tests read ../shared, once more as a fresh clone without it sees them: the
# tests' shared data root points at an empty folder, so every test on it must skip cleanly or
# use its own fixture. The other packages cannot tell the difference, so they do not run twice.
# .ci/run runs it after `make test`.
SHARED_PKGS = $(shell grep -rl --include='*_test.go' -e 'testenv\.SharedData' . | xargs -n1 dirname | sort -u)
test-unshared: fetch pydeps train-deps gn-int8r kafka kafka-connect postgres s3proxy tools
	@echo "test-unshared: $(SHARED_PKGS)"
	@empty=$$(mktemp -d) && trap 'rm -rf "$$empty"' EXIT && \
	  REIGNPIPE_SHARED_DATA=$$empty ops/with-kafka ops/with-postgres ops/with-kafka-connect ops/with-s3proxy env REIGNPIPE_STRICT=1 REIGNPIPE_PYTHON=$(PY) $(GO) test -count=1 -timeout 30m $(SHARED_PKGS)

test-go:
	REIGNPIPE_STRICT=1 REIGNPIPE_PYTHON=$(PY) $(GO) test -count=1 -timeout 30m ./...
	REIGNPIPE_STRICT=1 REIGNPIPE_PYTHON=$(PY) $(GO) test -count=1 -timeout 30m -race $(RACE_PKGS)

# A short burst of coverage-guided fuzzing of the input parsers on every test run; `make fuzz`
# runs every fuzz target for longer. Budgets are execution counts (Nx), not durations: Go 1.26's
# fuzz coordinator can report a spurious "context deadline exceeded" when a duration budget
# expires while a worker is mid-call on a loaded machine (golang/go#75804, fixed in Go 1.27).
SMOKE_FUZZ := ./pipelines/serving/serve/:FuzzReadRequest ./connectors/uspto/patentxml/:FuzzParseDocument ./connectors/uspto/:FuzzSplit \
	./connectors/wikipedia/:FuzzScanPages ./connectors/wikipedia/wikitext/:FuzzPlain ./connectors/jsonl/:FuzzParseLine \
	./connectors/wikipedia/:FuzzParseNamespaces ./connectors/wikipedia/:FuzzScanBounded ./connectors/wikipedia/pageset/:FuzzOpen ./connectors/textpolicy/:FuzzClean \
	./schemas/:FuzzDecodeChunkDoc ./schemas/:FuzzDecodeDocVector ./schemas/:FuzzDecodeRawDocument \
	./internal/kafkaclient/fragment/:FuzzFragmentHeaders ./internal/kafkaclient/fragment/:FuzzAssembler \
	./pipelines/quality/dataset/:FuzzLoCoRecords ./pipelines/:FuzzExpand ./connectors/pgcdc/:FuzzParseChange ./connectors/debezium/:FuzzDecode
SMOKE_FUZZTIME ?= 50000x
fuzz-smoke:
	@for t in $(SMOKE_FUZZ); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzz $$pkg $$fn ($(SMOKE_FUZZTIME))"; \
	  $(GO) test $$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $(SMOKE_FUZZTIME) >/tmp/reignpipe-fuzz.log 2>&1 || { cat /tmp/reignpipe-fuzz.log; exit 1; }; \
	done

FUZZTIME ?= 500000x
fuzz:
	@for t in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$t/*_test.go | cut -d' ' -f2); do \
	    echo "fuzz $$t $$f"; $(GO) test $$t -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; \
	  done; done

bench: fetch build
	ops/bench/run

$(PEERS_PY): ops/bench/peers/requirements.txt
	python3 -m venv $(PEERS_VENV)
	$(PEERS_PY) -m pip install -q --disable-pip-version-check -r ops/bench/peers/requirements.txt
	@touch $(PEERS_PY)

# reignpipe against sentence-transformers, Python onnxruntime and fastembed on the same windows
# (ops/bench/peers/driver.py says how); PEERS_DOCS, PEERS_ROUNDS, PEERS_BUDGETS, PEERS_VARIANTS tune it.
# The offline BERT-fused GN variants for gn.optimized: true (REIGNPIPE_HOME/gn/<name>-opt),
# written by onnxruntime.transformers in the peers venv and refused unless their sha256 is the
# one recorded in ops/bench/results/gn-2026-12-01.md.
gn-optimized: fetch $(PEERS_PY)
	$(PEERS_PY) ops/bench/ortopt/optimize.py bge-small-en-v15 --expect 78f4254e73c77590f1f5081f1142ebba4c1bc6867e797ce20bb7d095703f2cd4
	$(PEERS_PY) ops/bench/ortopt/optimize.py all-minilm-l6-v2 --expect 77d955ce00e07218d5f9420b7804eeb1a266941d8db23e16fa24e2c8bba790e5

# Static int8 variants of both GNs (REIGNPIPE_HOME/gn/<name>-int8s): fixed scales, so a window's
# vector does not depend on its batch; calibrated on the demo's Wikipedia sample. Run one with
# gn.name: bge-small-en-v15-int8s. See ops/bench/gnquant/quantize.py.
gn-int8: fetch $(PEERS_PY)
	$(PEERS_PY) ops/bench/gnquant/quantize.py bge-small-en-v15 --calibration "$$(ops/wikipedia-sample)"
	$(PEERS_PY) ops/bench/gnquant/quantize.py all-minilm-l6-v2 --calibration "$$(ops/wikipedia-sample)"

# Row-wise int8 variants of both GNs (REIGNPIPE_HOME/gn/<name>-int8r): per-token activation
# scales, 7-bit weights, exact integer products, so batch-invariant by construction; no
# calibration, so the file is a pure function of the fetched one and its sha256 is checked.
# Run one with gn.name: all-minilm-l6-v2-int8r. See ops/bench/gnquant/rowquant.py. make test
# builds them so that TestBatchInvariance checks them.
gn-int8r: fetch $(PY)
	$(PY) ops/bench/gnquant/rowquant.py bge-small-en-v15 --expect 9d0124b58e28b064d1c36965f3d5c5eb654c0f35c58447870b8bfc35c39b965b
	$(PY) ops/bench/gnquant/rowquant.py all-minilm-l6-v2 --expect 3160b050ffc621c97854514ef0bee58e5b91777b444ad4891a2abc1159d37489

# GN windows/s on an NVIDIA GPU, raw and end to end, with the English Wikipedia projection;
# exits 3 with a message where there is no GPU.
bench-gpu:
	ops/bench/gpu.sh

bench-peers: fetch build $(PEERS_PY)
	PEERS_PYTHON=$(PEERS_PY) ops/bench/peers/run

clean:
	rm -rf bin out
