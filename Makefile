# Developer entry points: a pinned virtualenv in .venv, training, tests, lint.
# With a ROS 2 distribution sourced, the venv sees the system rclpy; without one, rclpy and the
# message packages are installed as wheels from requirements-ros.txt.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
SHARE := $(VENV)/share/opolo_ros
CONFIG ?= config/inverted_pendulum.yaml
ARGS ?=
PYTEST_ARGS ?=

.PHONY: .venv train test lint clean

.venv: $(STAMP)

$(STAMP): requirements.txt requirements-ros.txt setup.py
	@if $(PYTHON) -c 'import rclpy' >/dev/null 2>&1; then \
		echo "system rclpy found: creating $(VENV) with --system-site-packages"; \
		$(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
		echo "no system rclpy: ROS 2 wheels will be installed into $(VENV)"; \
		$(PYTHON) -m venv $(VENV); \
	fi
	$(VENV)/bin/pip install -r requirements.txt
	@if ! $(PYTHON) -c 'import rclpy' >/dev/null 2>&1; then \
		echo "$(VENV)/bin/pip install -r requirements-ros.txt"; \
		$(VENV)/bin/pip install -r requirements-ros.txt; \
	fi
	$(VENV)/bin/pip install --no-deps --no-build-isolation -e .
	@# Editable installs skip data_files: link the share tree to the sources instead (as colcon's
	@# --symlink-install does), so ament_index finds opolo_ros with AMENT_PREFIX_PATH=$(VENV).
	mkdir -p $(SHARE) $(VENV)/share/ament_index/resource_index/packages
	touch $(VENV)/share/ament_index/resource_index/packages/opolo_ros
	for item in package.xml launch config models; do ln -sfn "$(CURDIR)/$$item" "$(SHARE)/$$item"; done
	touch $@

# OPOLO through the ROS 2 node graph (sim_bridge + actor + learner + demo_player, one process);
# ARGS are launch arguments, e.g. ARGS="seed:=1 total_steps:=5000".
train: .venv
	$(VENV)/bin/opolo-ros launch sim_train params_file:=$(CONFIG) $(ARGS)

test: .venv
	$(VENV)/bin/python -m pytest -q test $(PYTEST_ARGS)

lint: .venv
	$(VENV)/bin/ruff check opolo_ros test bench

clean:
	rm -rf build install log dist .eggs *.egg-info .pytest_cache .ruff_cache .hypothesis
	find opolo_ros test bench -name __pycache__ -type d -prune -exec rm -rf {} +
