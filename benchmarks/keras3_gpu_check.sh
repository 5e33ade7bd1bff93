#!/usr/bin/env bash
# The Keras 3 front on a GPU machine whose image has JAX,
# pytest and hypothesis but no TensorFlow: the Keras 3 tests that need no TensorFlow,
# on JAX's GPU backend, then the KV-cache decoding benchmark at GPU-sized contexts.
#
#   # on a machine with internet, once: the Keras 3 wheels the image lacks (this machine's .venv versions)
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
#     -d .whl keras==3.15.1 namex==0.1.0 optree==0.20.0
#   # on the GPU machine, with .whl copied along:
#   bash benchmarks/keras3_gpu_check.sh TEST_SECONDS BENCH_SECONDS
#
# Writes under $OUT: gpu_tests.log and gpu_tests.xml, and kv_gpu/ (benchmarks/kv_cache.py's
# json, md and plot). The tests run at full float32 matmul precision (tests/conftest.py);
# PRECISION=default runs them at JAX's GPU default instead, TF32 for float32 (on an H100:
# 69 failures against the float32 oracles, by up to 3e-3).
set -uo pipefail
cd "$(dirname "$0")/.."
test_seconds=${1:-270}
bench_seconds=${2:-200}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" KERAS_BACKEND=jax PYTHONUNBUFFERED=1
# Several pytest workers share the one GPU: allocate on demand.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import jax, keras; print('jax', jax.__version__, jax.devices(), 'keras', keras.__version__)"

files=""
for name in layers/layers layers/validation layers/per_head_mask layers/property_oracle \
  layers/quantize_lora layers/shared_kv reparam/kv_convert modeling/causal_lm modeling/modeling \
  tools modeling/model_options reparam/lm_file no_tensorflow; do
  files="$files tests/keras3/${name}_test.py"
done
# The files' own selection on JAX (tests/keras3/jax_backend_test.py) would skip nothing
# here that needs TensorFlow: a file that imports it fails collection and is reported.
common=(-q -n 8 -o addopts= -o cache_dir=/tmp/pytest_cache -m "not slow"
  --continue-on-collection-errors -rfE --tb=short)
if [ -n "${PRECISION:-}" ]; then export JAX_DEFAULT_MATMUL_PRECISION=$PRECISION; fi
# shellcheck disable=SC2086
timeout "$test_seconds" python3 -m pytest $files "${common[@]}" \
  --junitxml="$OUT/gpu_tests.xml" 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
timeout "$bench_seconds" python3 benchmarks/kv_cache.py --backends jax --repeats 5 \
  --steps 32 --batch 16 --contexts 2048,8192 --output "$OUT/kv_gpu" 2>&1 | tail -50
