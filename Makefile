# Entry points for developers and CI. Everything runs from the pinned virtualenv .venv/, which
# the first target that needs it creates from requirements.txt on Python 3.12 (see PYTHON).
#
#   make test        fast tests (what CI runs, through .ci/run)
#   make test-slow   the experiments marked @pytest.mark.slow
#   make demo        the live demo: sim_robot + estimator nodes over loopback DDS (`sysid demo`)
#   make bench       every script in bench/ (BENCH_ARGS=--quick for the short variants)
#   make colcon      colcon build of this package into $(COLCON_DIR)
#   make docs        the documentation site (docs/, mkdocs.yml), built strict into $(SITE_DIR)

SHELL := /bin/bash

VENV := .venv
PY := $(VENV)/bin/python
# Written after a complete install; requirements.txt or setup.* newer than it -> reinstall.
STAMP := $(VENV)/.installed
# .venv runs on Python 3.12: JAX after 0.10.2 needs >= 3.12 (0.10.2 miscompiles batched float64
# code on CPU, jax-ml/jax#39103) and 3.12 is ROS 2 Jazzy/Kilted's Python on Ubuntu 24.04. The
# interpreter that creates it is the first of python3.12 on PATH and pyenv's 3.12.x (newest
# first) that runs (a pyenv shim for a version not selected does not). There is no fallback to
# another version: the pins in requirements.txt are checked on 3.12 only, and the last ones that
# ran on 3.11 compute wrong numbers. `make BOOTSTRAP_PYTHON=/path/to/python3.12` names one.
PYTHON := 3.12
IS_PYTHON := -c 'import sys; sys.exit("%d.%d" % sys.version_info[:2] != "$(PYTHON)")'
BOOTSTRAP_PYTHON ?= $(shell \
    pyenv_root=$$(pyenv root 2>/dev/null || echo "$${PYENV_ROOT:-$$HOME/.pyenv}"); \
    for py in python$(PYTHON) $$(ls -d "$$pyenv_root"/versions/$(PYTHON).*/bin/python$(PYTHON) \
                                  2>/dev/null | sort -rV); do \
        "$$py" $(IS_PYTHON) 2>/dev/null && { command -v "$$py"; break; }; \
    done)
PYTEST_WORKERS ?= 2
# Whole test files per worker: a module's fixtures and jitted programs are built once, not
# once per worker (default run 17:31 -> 16:34 together with one test cut by ~30 s; user CPU
# 32.1 -> 30.7 min; 2 cores, fresh compile cache).
PYTEST_DIST ?= loadfile
COLCON_DIR ?= $(or $(TMPDIR),/tmp)/sysid_ros_colcon
SITE_DIR ?= .site

# Any ROS 2 participant started from here (tests, demo, benchmarks, nodes) stays on this
# machine: see config/fastdds_localhost.xml. JAX_ENABLE_X64 is deliberately not set here; the
# entry points and test/conftest.py enable float64 themselves.
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export FASTDDS_DEFAULT_PROFILES_FILE := $(CURDIR)/config/fastdds_localhost.xml

.PHONY: .venv test test-slow demo bench colcon docs

.venv: $(STAMP)

# `pip install -e .` builds a PEP 660 editable wheel, so pip writes the `sysid` console script
# into .venv/bin; the [develop]/[install] script_dir settings in setup.cfg are read only by
# `setup.py develop/install`, i.e. by colcon (which puts it in lib/sysid_ros for `ros2 run`).
# The last check guards that split. A .venv on another Python (an older checkout made it on 3.11)
# is made anew.
# The interface packages (interfaces/) are built with cmake into .venv after the wheels.
INTERFACE_SOURCES := $(shell find interfaces -type f)

$(STAMP): requirements.txt setup.py setup.cfg $(INTERFACE_SOURCES)
	@if [ -e $(VENV) ] && ! $(PY) $(IS_PYTHON) 2>/dev/null; then \
	    echo "$(VENV) does not run Python $(PYTHON): making it anew"; rm -rf $(VENV); fi
	@test -x $(PY) || "$(BOOTSTRAP_PYTHON)" $(IS_PYTHON) 2>/dev/null || { \
	    echo "error: .venv needs Python $(PYTHON), and $(if $(BOOTSTRAP_PYTHON),BOOTSTRAP_PYTHON=$(BOOTSTRAP_PYTHON) is not it,neither python$(PYTHON) on PATH nor pyenv has it)." \
	         "Install it (Ubuntu 24.04: apt install python$(PYTHON)-venv; or pyenv install $(PYTHON))" \
	         "or name it: make BOOTSTRAP_PYTHON=/path/to/python$(PYTHON)" >&2; \
	    exit 1; }
	test -x $(PY) || $(BOOTSTRAP_PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -r requirements.txt
	$(PY) -m pip install -e . --no-deps
	interfaces/build.sh $(VENV)
	@test -x $(VENV)/bin/sysid || { echo "error: pip did not install $(VENV)/bin/sysid" >&2; exit 1; }
	touch $@

test: .venv
	$(PY) -m pytest -q -m "not slow" -n $(PYTEST_WORKERS) --dist $(PYTEST_DIST) --durations=15 test/

test-slow: .venv
	$(PY) -m pytest -q -m slow test/

demo: .venv
	$(VENV)/bin/sysid demo

# bench/experiment_*.py are the experiments that bench/inference.py imports and runs. Each
# script runs as a module of the package bench (python -m bench.<name>) from the repository root.
BENCH_SCRIPTS := $(sort $(filter-out bench/_% bench/experiment_%,$(wildcard bench/*.py)))

bench: .venv
	@test -n "$(BENCH_SCRIPTS)" || echo "no benchmark scripts in bench/ yet"
	@set -e; for script in $(BENCH_SCRIPTS); do \
	    echo "== $$script"; $(PY) -m bench.$$(basename $$script .py) $(BENCH_ARGS); \
	done

# Builds as a ROS 2 workspace would (colcon-ros finds package.xml: ament_python, and the
# ament_cmake interface package, which colcon does not look for inside another package), outside
# the source tree so that no build/ install/ log/ folders land in the repository. The cmake
# argument stands in for rosidl_core_generators, which PyPI's wheels lack (interfaces/cmake/).
colcon: .venv
	rm -rf $(COLCON_DIR)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH \
	CMAKE_PREFIX_PATH=$(CURDIR)/$(VENV) AMENT_PREFIX_PATH=$(CURDIR)/$(VENV) \
	$(VENV)/bin/colcon --log-base $(COLCON_DIR)/log build \
	    --base-paths . interfaces/sysid_ros_interfaces \
	    --build-base $(COLCON_DIR)/build --install-base $(COLCON_DIR)/install \
	    --cmake-args -Drosidl_core_generators_DIR=$(CURDIR)/interfaces/cmake -DBUILD_TESTING=OFF
	@echo "installed into $(COLCON_DIR)/install (source $(COLCON_DIR)/install/setup.bash)"

# Warnings fail the build (mkdocs.yml: strict), as in test/test_docs.py; the references are
# generated from the code by docs/hooks/reference.py. Material's banner about MkDocs 2.0 is
# not a warning of the build and is left out.
docs: .venv
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir $(SITE_DIR)
	@echo "open $(SITE_DIR)/index.html"
