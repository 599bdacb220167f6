# Two entry points (see README): `make run` (the main job, offline, embedded default) and `make test`.
# Both create or reuse the virtual environment .venv: every package at the exact version and hash of the lock file
# envs/cpu.lock (CPU torch), then this package (editable, without dependencies: the lock holds them all).
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
# Cores of make run / make rehearsal: every core of the machine unless set (`make run CORES=2`).
CORES ?= $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
LOCK := envs/cpu.lock
# Where the lock's CPU torch wheel is found: pip's own find-links where set (a local wheel folder), else the PyTorch
# CPU index's torch page; every other package comes from PyPI.
TORCH_CPU_WHEELS ?= $(or $(PIP_FIND_LINKS),https://download.pytorch.org/whl/cpu/torch/)

.PHONY: run test bench gpu-check rehearsal venv lock dist docs docs-teaser clean-results

venv: $(STAMP)

$(STAMP): $(LOCK) pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet --require-hashes --no-deps $(addprefix --find-links ,$(TORCH_CPU_WHEELS)) -r $(LOCK)
	$(VENV)/bin/pip install --quiet --no-deps -e .
	touch $(STAMP)

# The lock files, for Linux x86_64 and Python 3.11: envs/cpu.lock (make, CI: the workflow and test extras with the
# CPU build of torch) and envs/cuda.lock (envs/stochattn.yaml: the same versions with PyPI's CUDA build of torch, and
# the timm extra: PyPI's torchvision is built for CUDA torch only), every package at an exact version with its hashes,
# torch at the version of envs/constraints.txt. After a change of pyproject.toml's dependencies, `make lock`
# re-resolves both keeping every version it can; `make lock LOCK_ARGS=--upgrade` moves everything to the newest
# versions allowed (then run `make test`). It needs PyPI (through uv) and TORCH_CPU_WHEELS.
UV_VENV := .venv-uv
UV_VERSION := 0.13.9
LOCK_ARGS ?=
LOCK_COMPILE = $(UV_VENV)/bin/uv pip compile pyproject.toml --extra workflow --extra test \
	--constraint envs/constraints.txt --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	--custom-compile-command "make lock" --quiet $(LOCK_ARGS)
lock:
	test -x $(UV_VENV)/bin/uv || { $(PYTHON) -m venv $(UV_VENV) && $(UV_VENV)/bin/pip install --quiet uv==$(UV_VERSION); }
	$(LOCK_COMPILE) $(addprefix --find-links ,$(TORCH_CPU_WHEELS)) --no-emit-find-links -o envs/cpu.lock
	grep -q '^torch==.*+cpu ' envs/cpu.lock || \
		{ echo "envs/cpu.lock: no CPU torch wheel at $(TORCH_CPU_WHEELS)" >&2; exit 1; }
	cp envs/cpu.lock envs/cuda.lock  # the CUDA lock starts from the CPU lock's versions and keeps them where it can
	$(LOCK_COMPILE) --extra timm -o envs/cuda.lock
	$(PYTHON) envs/conda_env.py  # envs/stochattn.yaml's pip section: envs/cuda.lock inline

# The release artefacts in dist/: the sdist and the wheel built from it (`python -m build`), then `twine check` on both
# (metadata, the README as the long description). No build isolation: the build uses the lock's setuptools in .venv,
# offline and at a pinned version. tests/test_release.py builds the same way and installs the wheel in a fresh venv.
dist: $(STAMP)
	rm -rf dist
	$(VENV)/bin/python -m build --no-isolation --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

# --max-jobs-per-timespan: Snakemake (9.x) re-schedules ever more often as jobs finish (about n times a second after n
# jobs: docs/measurements.md, "Snakemake's scheduler"); 10 s makes those rounds 10x rarer. Jobs still start as soon as
# one ends (a completion wakes the scheduler), and the run ends at most 10 s after its last job.
run: $(STAMP)
	$(VENV)/bin/snakemake --cores $(CORES) --configfile=config/quick.yaml --max-jobs-per-timespan 100/10s  # profiles/default applies by itself

# The suite in TEST_WORKERS pytest-xdist processes, one test file per worker at a time (--dist loadfile: a file's
# module-scoped fixtures, e.g. the tiny DAG runs, are built once). Two workers overlap the tests that wait (the sbatch
# jobs of the SLURM test, the kill -9 rerun) with the ones that compute.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/bench_attention.py

# The cluster configuration's code path at the real model sizes, offline on CPU (config/rehearsal.yaml): the DAG writes
# the public downloads itself (random weights, synthetic WeatherBench files); nothing in it is a result.
REHEARSAL_DIR ?= rehearsal-run
rehearsal: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/snakemake --cores $(CORES) --directory $(REHEARSAL_DIR) --configfile=config/rehearsal.yaml

# On a CUDA machine: the CUDA-only tests, SA vs the deterministic pass on the full-size TimesFM / ClimaX, the tiny
# DAG of every slice on the GPU; one summary table. Without CUDA it says so and exits 0.
gpu-check: $(STAMP)
	$(VENV)/bin/python benchmarks/gpu_check.py

# The documentation (mkdocs.yml, docs/) into site/, strict: a broken link or a docstring that does not render fails
# (tests/test_docs.py builds it too). `.venv/bin/mkdocs serve` shows it while you edit. The README's teaser is a copy of
# the workflow's results/figures/teaser.png: `make docs-teaser` after a make run refreshes it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict --site-dir site  # quiet: the theme's banners

docs-teaser: $(STAMP)
	$(VENV)/bin/python -c "from PIL import Image; im = Image.open('results/figures/teaser.png').convert('RGB'); \
		im.thumbnail((1200, 1200)); im.quantize(256).save('docs/assets/teaser.png', optimize=True)"
