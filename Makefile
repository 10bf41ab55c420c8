# Two commands for a fresh machine: `make report` and `make test`.
# Both create the virtual environment on first use and install what is missing, system packages
# included: the report needs pango (WeasyPrint's PDF); the tests also poppler-utils, chromium and npm.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-stamp
SYSTEM_STAMP = $(VENV)/.system-stamp
TEST_SYSTEM_STAMP = $(VENV)/.test-system-stamp
TEST_STAMP = $(VENV)/.test-installed-stamp

# Debian packages and the command (or library) that proves each is there.
SYSTEM_PACKAGES = libpango-1.0-0:libpango-1.0.so.0 libpangoft2-1.0-0:libpangoft2-1.0.so.0
TEST_SYSTEM_PACKAGES = poppler-utils:pdftoppm chromium:chromium xz-utils:xz sqlite3:sqlite3 npm:npm

.PHONY: report test bench setup system-deps clean

report: setup
	@mkdir -p out
	$(BIN)/nsanalyze report fixtures/dev_suite_full.ncu-rep.xz fixtures/dev_suite_nsys.sqlite.xz \
		-o out/report.html -o out/report.pdf -o out/report.md -o out/report.json
	$(BIN)/nsanalyze report fixtures/dev_suite_full.ncu-rep.xz fixtures/dev_suite_nsys.sqlite.xz

# The published SARIF 2.1.0 JSON schema, as npm ships it (for the SARIF validation test).
SARIF_SCHEMA = tests/.schemas/sarif-2.1.0-rtm.5.json

# Two pytest-xdist workers by default, whole test files each, the longest first (tests/conftest.py): on the 2-core
# machine about 7 minutes with the set-up on a fresh clone, against 16 min 32 s in one process; the largest process
# about 1.2 GB (README has the measured figures). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2

test: setup $(TEST_SYSTEM_STAMP) $(TEST_STAMP) $(SARIF_SCHEMA)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

$(TEST_SYSTEM_STAMP): $(SYSTEM_STAMP)
	@bash scripts/system-deps.sh $(TEST_SYSTEM_PACKAGES)
	@touch $@

$(SARIF_SCHEMA): $(TEST_SYSTEM_STAMP)
	@mkdir -p tests/.schemas
	cd tests/.schemas && npm pack --silent @microsoft/jest-sarif@1.0.0-beta.0 >/dev/null && \
		tar xzf microsoft-jest-sarif-1.0.0-beta.0.tgz --strip-components=3 package/lib/schemas/sarif-2.1.0-rtm.5.json && \
		rm -f microsoft-jest-sarif-1.0.0-beta.0.tgz

bench: setup
	$(BIN)/python bench/lean.py
	$(BIN)/python bench/run.py
	$(BIN)/python bench/calibration.py

# Bytecode compiled ahead, as a wheel's install does: an editable install compiles on import, and where
# PYTHONDONTWRITEBYTECODE is set (this project's machines) it compiles every module on every run (0.2 s).
setup: $(SYSTEM_STAMP) $(STAMP)
	@$(BIN)/python -m compileall -q nsanalyze

$(SYSTEM_STAMP):
	@bash scripts/system-deps.sh $(SYSTEM_PACKAGES)
	@mkdir -p $(VENV) && touch $@

# uv installs (from PyPI, as pip does) with parallel downloads and without compiling every installed module
# ahead: the set-up took 84 s with pip on a fresh clone, most of it pip compiling in one process; compile_site
# below compiles on every core instead (this project's machines set PYTHONDONTWRITEBYTECODE, under which every
# process that imports pandas and the rest would otherwise compile them again). Where uv cannot be had, pip does
# the same installs.
install = if $(BIN)/python -m uv --version >/dev/null 2>&1; \
	then $(BIN)/python -m uv pip install -q --python $(BIN)/python $(1); \
	else $(BIN)/python -m pip install -q $(1); fi

# The installed packages' bytecode, compiled ahead on every core once they are installed (uv leaves it to the
# first import): on a fresh clone the suite's first run took 9 min 7 s of pytest against 7 min 10 s for the next
# run in the same clone, its processes compiling pandas, matplotlib and the rest side by side as each first
# imported them; compiling all of site-packages ahead takes about 21 s on the 2 cores. A module that does not
# compile (a package's Python 2 example) is skipped: this only saves time.
compile_site = $(BIN)/python -m compileall -q -j 0 $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
	>/dev/null 2>&1 || true

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv || $(BIN)/python -m pip install -q --upgrade pip
	$(call install,-e .)
	@$(compile_site)
	@touch $@

$(TEST_STAMP): $(STAMP)
	$(call install,-e '.[test]')
	@$(compile_site)
	@touch $@

clean:
	rm -rf $(VENV) out
