#!/usr/bin/env bash
# The fused SA kernel on a CUDA GPU in one go (docs/gpu.md "The fused kernel on a GPU"): versions, the law tests
# compiled for the device (tests/test_triton_sa_cuda.py, max |z| per case), the full-size TimesFM 2.5 / ClimaX rows
# of gpu_check.py (explicit path vs fused kernel), then the kernel against fused SDPA before and after tuning
# (benchmarks/bench_triton_sa.py --kernel-table, every autotuned configuration's time in kernel.json) and peak memory,
# then benchmarks/profile_sa.py at nu 16 with the fp32 scores in 3xTF32 and in FFMA (profile.txt).
# Each part has its own timeout (LAW_TIMEOUT, WARM_TIMEOUT, MODEL_TIMEOUT, KERNEL_TIMEOUT, PROFILE_TIMEOUT seconds;
# 0 leaves that part out, so that a device session can split the parts over calls of at most 10 minutes) and writes
# as it goes;
# WARM compiles every variant in parallel processes beside the law tests (Triton's cache), so the timed parts do not
# compile. LAW_SELECT (a pytest -k expression) runs a part of the law tests; KERNEL_NUS ("1 4 16 64") the kernel
# table's nu, and only those cells are compiled.
#   bash benchmarks/gpu_kernel_check.sh [OUTDIR]      (python: $PYTHON, default python3; every core of the node)
# WHEELS=DIR installs the wheels in DIR for this run only (OUTDIR/site, after the repository's src on PYTHONPATH), for
# a node whose environment lacks a package the model rows need (timesfm: `pip download --no-deps --only-binary=:all:
# --python-version 3.12 -d DIR "timesfm>=3.0.2,<3.1"` where the index can be reached).
set -u
mkdir -p "${1:-gpu-kernel-check}"
out=$(cd "${1:-gpu-kernel-check}" && pwd)  # absolute: the law tests write law_z.jsonl there from another directory
py=${PYTHON:-python3}
workers=$(( $(nproc) > 12 ? 12 : $(nproc) ))
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 SA_LAW_LOG="$out/law_z.jsonl"
rm -f "$SA_LAW_LOG"
if [ -n "${WHEELS:-}" ]; then
  $py -m pip install -q --no-deps --no-index --target "$out/site" "$WHEELS"/*.whl && export PYTHONPATH="$PYTHONPATH:$out/site"
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $py -c "import torch, triton; print('torch', torch.__version__, '(CUDA', torch.version.cuda + ') triton', triton.__version__)"
} 2>&1 | tee "$out/env.txt"
start=$SECONDS  # compile and autotune every variant of the model rows and the kernel table in parallel processes,
# beside the law tests (both mostly compile on the CPU cores)
kernel_nus=(--kernel-nus ${KERNEL_NUS:-1 4 16 64 512 4096})
run_part() {  # run_part TIMEOUT COMMAND...: the command under `timeout`, or nothing where TIMEOUT is 0 (`timeout 0`
  # would mean no limit at all)
  local limit=$1
  shift
  if [ "$limit" = 0 ]; then echo "(left out: timeout 0)"; return 0; fi
  timeout "$limit" "$@"
}
run_part "${WARM_TIMEOUT:-240}" $py benchmarks/bench_triton_sa.py --warm "$workers" --warm-only "${kernel_nus[@]}" \
  >"$out/warm.txt" 2>&1 &
warm_pid=$!
# -v -rfE: a line per test as it ends, so a time limit that stops the file before pytest's summary still shows which
# test failed (2026-12-04: one "F" and no name), and the failures' reasons in the summary
run_part "${LAW_TIMEOUT:-240}" $py -m pytest -v -rfE -p no:cacheprovider -n "$workers" tests/test_triton_sa_cuda.py \
  ${LAW_SELECT:+-k "$LAW_SELECT"} >"$out/law.txt" 2>&1
echo "law tests (finished at $((SECONDS - start)) s): $(tail -1 "$out/law.txt")"
echo "  $(grep -c " PASSED " "$out/law.txt") passed"
grep -E " (FAILED|ERROR) |^(FAILED|ERROR)|Error|crashed" "$out/law.txt" | head -20
$py - "$SA_LAW_LOG" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])] if __import__("os").path.exists(sys.argv[1]) else []
for r in sorted(rows, key=lambda r: r["case"]):
    if "max_z_mean" in r:
        print(f"  {r['case']:<40} max|z| mean {r['max_z_mean']:.2f}  cov {r['max_z_cov']:.2f}")
    else:
        print(f"  {r['case']:<40} " + ", ".join(f"{k} {v:.5f}" for k, v in r.items() if k != "case"))
PY
wait "$warm_pid"
echo "compiling (done at $((SECONDS - start)) s from the start of the law tests): $(grep -E "compiled|Error" "$out/warm.txt" | tail -2)"
start=$SECONDS
run_part "${MODEL_TIMEOUT:-240}" $py benchmarks/gpu_check.py --skip-dag --skip-tests --skip-kernel >"$out/models.txt" 2>&1
echo "model rows ($((SECONDS - start)) s):"; tail -16 "$out/models.txt"
start=$SECONDS
run_part "${KERNEL_TIMEOUT:-300}" $py benchmarks/bench_triton_sa.py --kernel-table --skip-explicit \
  --json "$out/kernel.json" --repeats 10 "${kernel_nus[@]}" >"$out/kernel.txt" 2>&1
echo "memory and kernel table ($((SECONDS - start)) s):"; grep -E "peak memory|kernel / SDPA|Error" "$out/kernel.txt" | tail -50
if [ "${PROFILE_TIMEOUT:-240}" != 0 ]; then  # PROFILE_TIMEOUT=0 leaves it out (e.g. for a separate call)
  start=$SECONDS  # where the whole-model overhead goes: paired wall ratios, device time, host growth, synchronisations
  timeout "${PROFILE_TIMEOUT:-240}" $py benchmarks/profile_sa.py --nu 16 --fp32-scores tf32x3 ieee --top 8 \
    >"$out/profile.txt" 2>&1
  echo "profile ($((SECONDS - start)) s):"; grep -E "^== |Error" "$out/profile.txt"
fi
if [ -n "${OLD_SRC:-}" ]; then  # the same model rows with another checkout's src/ (e.g. the commit before tuning)
  start=$SECONDS
  PYTHONPATH="$PWD/$OLD_SRC:${PYTHONPATH#"$PWD/src:"}" timeout "${OLD_TIMEOUT:-240}" $py benchmarks/gpu_check.py --skip-dag \
    --skip-tests --skip-kernel >"$out/models_before.txt" 2>&1
  echo "model rows with $OLD_SRC ($((SECONDS - start)) s):"; tail -12 "$out/models_before.txt"
fi
