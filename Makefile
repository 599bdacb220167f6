# Two entry points (see README): `make run` (the main job, offline, embedded default) and `make test`.
# Both create or reuse the virtual environment .venv: torch==2.13.0 (CPU build) first, then the project.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
CORES ?= 2

.PHONY: run test bench gpu-check rehearsal venv clean-results

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet torch==2.13.0
	$(VENV)/bin/pip install --quiet -e ".[workflow,test]"
	touch $(STAMP)

# --max-jobs-per-timespan: Snakemake (9.x) arms a 1-s re-scheduling timer after every scheduling round, and each
# job's completion starts one more such chain: after n finished jobs it re-schedules ~n times a second, which took
# 25.8 CPU-minutes in the first 118 min of make run (22 % of a core; 134 threads at 75 min; 2026-11-26). 10 s makes
# those rounds 10x rarer; jobs still start as soon as one ends (a completion wakes the scheduler), and the run ends
# at most 10 s after its last job (the last timer).
run: $(STAMP)
	$(VENV)/bin/snakemake --cores $(CORES) --configfile=config/quick.yaml --max-jobs-per-timespan 100/10s  # profiles/default applies by itself

# The suite in TEST_WORKERS pytest-xdist processes, one test file per worker at a time (--dist loadfile: a file's
# module-scoped fixtures, e.g. the tiny DAG runs, are built once). Two workers overlap the tests that wait (the sbatch
# jobs of the SLURM test, the kill -9 rerun) with the ones that compute.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

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
