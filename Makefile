# Two commands for a fresh machine: `make run` and `make test`. Everything else is a helper of those.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-unit lint bench-ingest bench-retrieval clean

# pytest-xdist workers for `make test`; each starts its own Milvus Lite server and Celery worker and loads the models
# (a test process held 2.3 GB resident here, its Celery worker besides). Whole files go to one worker
# (`--dist loadfile`), so a file's module fixtures are set up once. TEST_WORKERS=0 runs the suite in this one process.
TEST_WORKERS ?= 2

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

# Browser tests use Debian's chromium package, never a browser download.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "Install Chromium at $(CHROMIUM) for the browser tests"; exit 1; }
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

run: $(STAMP)
	$(BIN)/python -m kbplatform.devserver

test: $(STAMP) $(CHROMIUM)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

# The tests that need no service (no Milvus, worker or Redis fixture, no browser): tests/conftest.py marks every
# test using a service fixture `integration`, so this stays true as tests are added.
test-unit: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/pytest -m "not integration and not browser"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

bench-ingest: $(STAMP)
	$(BIN)/python bench/ingest.py

bench-retrieval: $(STAMP)
	$(BIN)/python bench/retrieval_quality.py

clean:
	rm -rf var/ .pytest_cache .ruff_cache
