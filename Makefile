# The developer workflow. `make demo` and `make test` work on a fresh machine: each
# creates the virtual environment and installs hami-core and every backend first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
BACKENDS := $(wildcard backends/hami-*)
STAMP := $(VENV)/.installed
CORE_STAMP := $(VENV)/.core-installed

.PHONY: demo test test-fast test-packaging lint typecheck layers pytest install clean prometheus dashboards bench bench-quick chart-repo cross web-view-screenshot

# What `make demo` needs and no more: hami-core and every backend. A new venv's
# setuptools is too old for the backends' build-system (>=77): the shim and packaging
# tests build them without isolation, so upgrade it with pip.
$(CORE_STAMP): pyproject.toml $(wildcard backends/*/pyproject.toml) $(wildcard shim/src/*) $(wildcard shim/Makefile)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "hami needs Python >= 3.11; set PYTHON=python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip 'setuptools>=77' wheel
	$(BIN)/python -m pip install --quiet -e . $(foreach b,$(BACKENDS),-e $(b))
	touch $@

# Everything the tests need besides: the dev extras, checkov in a venv of its own (the
# chart's scan) and Chromium (the web view's browser tests).
$(STAMP): $(CORE_STAMP) tests/chart/scan-requirements.txt
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(PYTHON) -m venv $(VENV)/scan
	$(VENV)/scan/bin/python -m pip install --quiet -r tests/chart/scan-requirements.txt
	scripts/chromium-install.sh >/dev/null || echo "warning: no chromium: the web view's browser tests will be skipped (and fail the run under HAMI_TEST_NO_SKIPS=1, as in .ci/run)" >&2
	touch $@

install: $(STAMP)

demo: $(CORE_STAMP)
	$(BIN)/hami simulate

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy hami_core $(foreach b,$(BACKENDS),$(b)/hami_$(subst hami-,,$(notdir $(b)))) examples/backend-example/hami_example

layers: $(STAMP)
	$(BIN)/lint-imports

# Every tier: unit, conformance, integration, shim (real dlopen of libvgpu.so), packaging
# (every sdist and wheel built and installed into fresh venvs) and e2e
# (real kube-apiserver / kube-scheduler / kubelet, built once by scripts/kube-build.sh).
pytest: $(STAMP)
	$(BIN)/python -m pytest

test: lint typecheck layers pytest

# Speed and memory figures (docs/performance.md), not part of `make test`: each benchmark
# prints a table whose last line is its headline ratio. The real-pipeline and Allocate
# runs need the Kubernetes binaries (built once by scripts/kube-build.sh); the packing
# run needs HiGHS (highspy, from PyPI). `make bench-quick` runs smaller sizes.
BENCHES := bench_filter bench_rss bench_allocate bench_packing bench_preemption bench_pipeline bench_gang bench_defrag bench_explain bench_ui
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet 'highspy>=1.7'
	scripts/kube-build.sh
	set -e; for b in $(BENCHES); do echo "== $$b"; $(BIN)/python benchmarks/$$b.py; done

bench-quick: $(STAMP)
	$(BIN)/python -m pip install --quiet 'highspy>=1.7'
	scripts/kube-build.sh
	set -e; for b in $(BENCHES); do echo "== $$b"; $(BIN)/python benchmarks/$$b.py --quick; done

# Everything but the e2e and packaging tiers (no Kubernetes build, no fresh venvs).
test-fast: lint typecheck layers
	$(BIN)/python -m pytest -m "not e2e and not packaging"

# Build every sdist and wheel (hami-nvidia's also for aarch64, its library tested under
# QEMU), serve them from a local PEP 503 index and install them by name into fresh venvs
# as users do (part of `make test`; needs the package index or pip's cache, and installs
# the cross compiler and QEMU once: scripts/cross-install.sh).
test-packaging: $(STAMP)
	$(BIN)/python -m pytest -m packaging

# Prometheus server + promtool (Debian's package) for the rules tests and the e2e tier;
# the test fixtures run the same script when they are missing.
prometheus:
	scripts/prometheus-install.sh

# The aarch64 cross compiler and QEMU user-mode (Debian's packages) for the aarch64
# wheel and the shim's tests under QEMU; the test fixtures run the same script.
cross:
	scripts/cross-install.sh

# The chart as a chart repository serves it: dist/charts/hami-<version>.tgz (linted with
# every example) and dist/charts/index.yaml.
chart-repo: $(STAMP)
	$(BIN)/python scripts/package-chart.py --out dist/charts

# Regenerate the chart's Grafana dashboards from scripts/gen-dashboards.py.
dashboards: $(STAMP)
	$(BIN)/python scripts/gen-dashboards.py

# Refresh docs/web-view.png (the picture of hami ui in the README and docs/web-view.md)
# from the e2e test's browser run; every other run writes its screenshot under a tmp
# directory, leaving the checkout as it was.
web-view-screenshot: $(STAMP)
	scripts/kube-build.sh
	HAMI_UI_SCREENSHOT=$(CURDIR)/docs/web-view.png $(BIN)/python -m pytest -p no:cacheprovider tests/e2e/test_ui.py -k screenshot

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
