# Entry points for developers and CI. Everything runs from the pinned virtualenv .venv/, which
# the first target that needs it creates from requirements.txt.
#
#   make test        fast tests (what CI runs, through .ci/run)
#   make test-slow   the experiments marked @pytest.mark.slow
#   make demo        the live demo: sim_robot + estimator nodes over loopback DDS (`sysid demo`)
#   make bench       every script in bench/ (BENCH_ARGS=--quick for the short variants)
#   make colcon      colcon build of this package into $(COLCON_DIR)

SHELL := /bin/bash

VENV := .venv
PY := $(VENV)/bin/python
# Written after a complete install; requirements.txt or setup.* newer than it -> reinstall.
STAMP := $(VENV)/.installed
BOOTSTRAP_PYTHON ?= $(shell command -v python3.11 || command -v python3)
PYTEST_WORKERS ?= 2
COLCON_DIR ?= $(or $(TMPDIR),/tmp)/sysid_ros_colcon

# Any ROS 2 participant started from here (tests, demo, benchmarks, nodes) stays on this
# machine: see config/fastdds_localhost.xml. JAX_ENABLE_X64 is deliberately not set here; the
# entry points and test/conftest.py enable float64 themselves.
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export FASTDDS_DEFAULT_PROFILES_FILE := $(CURDIR)/config/fastdds_localhost.xml

.PHONY: .venv test test-slow demo bench colcon

.venv: $(STAMP)

$(PY):
	@test -n "$(BOOTSTRAP_PYTHON)" || { echo "error: python3.11 (or python3) not found" >&2; exit 1; }
	$(BOOTSTRAP_PYTHON) -m venv $(VENV)

# `pip install -e .` builds a PEP 660 editable wheel, so pip writes the `sysid` console script
# into .venv/bin; the [develop]/[install] script_dir settings in setup.cfg are read only by
# `setup.py develop/install`, i.e. by colcon (which puts it in lib/sysid_ros for `ros2 run`).
# The last check guards that split.
$(STAMP): requirements.txt setup.py setup.cfg | $(PY)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install -e . --no-deps
	@test -x $(VENV)/bin/sysid || { echo "error: pip did not install $(VENV)/bin/sysid" >&2; exit 1; }
	touch $@

test: .venv
	$(PY) -m pytest -q -m "not slow" -n $(PYTEST_WORKERS) --durations=15 test/

test-slow: .venv
	$(PY) -m pytest -q -m slow test/

demo: .venv
	$(VENV)/bin/sysid demo

# bench/experiment_*.py are the experiments that bench/inference.py imports and runs.
BENCH_SCRIPTS := $(sort $(filter-out bench/_% bench/experiment_%,$(wildcard bench/*.py)))

bench: .venv
	@test -n "$(BENCH_SCRIPTS)" || echo "no benchmark scripts in bench/ yet"
	@set -e; for script in $(BENCH_SCRIPTS); do \
	    echo "== $$script"; $(PY) $$script $(BENCH_ARGS); \
	done

# Builds as a ROS 2 workspace would (colcon-ros finds package.xml: ament_python), outside the
# source tree so that no build/ install/ log/ folders land in the repository.
colcon: .venv
	rm -rf $(COLCON_DIR)
	$(VENV)/bin/colcon --log-base $(COLCON_DIR)/log build --base-paths . \
	    --build-base $(COLCON_DIR)/build --install-base $(COLCON_DIR)/install
	@echo "installed into $(COLCON_DIR)/install (source $(COLCON_DIR)/install/setup.bash)"
