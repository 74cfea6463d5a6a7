# kqlab — the two commands: `make demo` and `make test` (both set everything up first).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The set-up re-runs only when what it installs from changes (the prebuilt JupyterLab extension
# and the server extension's config are copied into the venv's share/ and etc/ folders).
SETUP_INPUTS := pyproject.toml $(wildcard setup.py) $(wildcard kqlab/kafka/*.c) $(wildcard kqlab/serde/*.c) \
  $(sort $(wildcard kqlab/lab/labextension/*.json kqlab/lab/labextension/static/*)) \
  jupyter-config/jupyter_server_config.d/kqlab.json
STAMP  := $(VENV)/.setup-$(shell cat $(SETUP_INPUTS) 2>/dev/null | sha1sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: setup setup-kafka setup-spark-kafka setup-topic-policy setup-browser setup-datacontract demo test test-pure test-browser lab bench lint \
        check-java clean readme-screenshot labextension

setup: $(STAMP) check-java setup-kafka setup-spark-kafka setup-topic-policy

# the real Apache Kafka broker (demo + tests) from Maven Central: extensions/kafka-broker/
setup-kafka: $(STAMP)
	@PY=$(BIN)/python scripts/setup-kafka

# Spark's own Kafka connector (format("kafka")) at pyspark's version, only the jars pyspark lacks:
# extensions/spark-kafka/ (kqlab's sessions load them as local files, never at run time)
setup-spark-kafka: $(STAMP)
	@PY=$(BIN)/python scripts/setup-spark-kafka

# kqlab's topic policy as a broker plugin (KIP-108/133): extensions/topic-policy/ -> its jar
setup-topic-policy:
	@scripts/setup-topic-policy

$(STAMP): $(SETUP_INPUTS)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "kqlab needs Python >= 3.11 (found: $$($(PYTHON) --version 2>&1)); set PYTHON=..."; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -e '.[all]'
	@# an editable install leaves setup.py's data_files out: link the prebuilt extension and
	@# enable the server extension as `pip install kqlab[lab]` does
	@mkdir -p $(VENV)/share/jupyter/labextensions && rm -rf $(VENV)/share/jupyter/labextensions/kqlab-lab
	ln -s $(CURDIR)/kqlab/lab/labextension $(VENV)/share/jupyter/labextensions/kqlab-lab
	install -D -m 644 jupyter-config/jupyter_server_config.d/kqlab.json \
	  $(VENV)/etc/jupyter/jupyter_server_config.d/kqlab.json
	@$(BIN)/jupyter labextension list 2>&1 | grep -q 'kqlab-lab .*enabled.*OK' || \
	  { echo "the kqlab-lab JupyterLab extension is not enabled:"; $(BIN)/jupyter labextension list; exit 1; }
	@rm -f $(VENV)/.setup-*
	@touch $@

check-java:
	@scripts/check-java

# the real-browser test's tools: Debian chromium and the pinned npm packages of e2e/
# (Playwright never downloads a browser here)
E2E_STAMP := e2e/node_modules/.kqlab-$(shell cat e2e/package-lock.json 2>/dev/null | sha1sum | cut -c1-12)
setup-browser: $(E2E_STAMP)
	@scripts/install-chromium

$(E2E_STAMP): e2e/package.json e2e/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "the browser test needs node + npm (Node >= 20)" >&2; exit 1; }
	cd e2e && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
	@rm -f e2e/node_modules/.kqlab-*
	@touch $@

# datacontract-cli, the ODCS linter tests/export/test_odcs.py runs, in a virtualenv of its own
# under ~/.cache/kqlab (its dependencies clash with kqlab's); idempotent
setup-datacontract:
	@PYTHON=$(PYTHON) scripts/setup-datacontract >/dev/null

# the demo partition replayed through its policy, its HTML report, and the policy exported to
# every enforcement target with the fidelity report (all under out/demo/), what is deployed
# verified against it (the exported files, then a deployment with drift planted); then the
# demo topics through the embedded broker (produced, sampled back, checked against their documented
# defects); then the demo topics on Spark and locally, every verdict compared (parity check)
demo: setup setup-datacontract
	$(BIN)/kqlab demo --dir out/demo
	@echo
	$(BIN)/kqlab report out/demo/orders-0 --policy kqlab/sources/demo_policy.yaml --out out/demo/report.html
	$(BIN)/kqlab export kqlab/sources/demo_policy.yaml --target all --sample out/demo/orders-0 --out out/demo/export \
	  --accept-approximations
	@echo "  fidelity report: out/demo/export/fidelity.html"
	@echo
	$(BIN)/kqlab verify kqlab/sources/demo_policy.yaml --gate-config out/demo/export/gate/gate.yaml \
	  --contract out/demo/export/confluent/orders-value.register.json
	@echo
	$(BIN)/kqlab demo --verify
	@echo
	$(BIN)/kqlab demo --topics
	@echo
	$(BIN)/kqlab demo --spark

# pytest's exit code 5 means "no tests ran": that is a failure here, there must be tests.
test: setup setup-browser setup-datacontract
	@$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	  exit $$rc

# the pure-Python reference kernels (what runs where the C extension cannot be built)
test-pure: setup
	KQLAB_PURE_PYTHON=1 $(BIN)/python -m pytest tests/kafka $(PYTEST_ARGS)

# JupyterLab, Notebook 7 and marimo in Debian chromium: the quickstart notebook run and the
# workbench used in the page, the anywidget views in marimo (part of `make test`; screenshots
# under out/browser/)
test-browser: setup setup-browser
	$(BIN)/python -m pytest tests/browser -p no:cacheprovider $(PYTEST_ARGS)

# the README's screenshot (docs/img/workbench.png), taken by the Notebook 7 browser test
readme-screenshot: setup setup-browser
	KQLAB_README_SHOT=docs/img/workbench.png $(BIN)/python -m pytest tests/browser/test_notebook7.py \
	  -p no:cacheprovider $(PYTEST_ARGS)

# rebuild the prebuilt JupyterLab extension from extensions/kqlab-lab/ (needs node + npm; the
# built assets under kqlab/lab/labextension/ are committed, users and CI need no Node.js)
labextension:
	$(BIN)/python scripts/build_labextension.py

lint: setup
	$(BIN)/ruff check kqlab tests benchmarks scripts
	$(BIN)/mypy

# JupyterLab opened on the quickstart notebook (the printed address too; the other notebooks
# are in the file browser beside it)
LAB_NOTEBOOK ?= 01_quickstart.ipynb
lab: setup
	$(BIN)/jupyter lab --ip 127.0.0.1 --notebook-dir notebooks \
	  --LabApp.default_url=/lab/tree/$(LAB_NOTEBOOK)

# the benchmarks' peers (Great Expectations, pandera) are not needed by the tests;
# browser_edit.py drives JupyterLab in chromium
bench: setup setup-browser
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b $(BENCH_ARGS) || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .ruff_cache e2e/node_modules \
	  extensions/kqlab-lab/node_modules extensions/kqlab-lab/lib
	find kqlab -name '*.so' -delete
