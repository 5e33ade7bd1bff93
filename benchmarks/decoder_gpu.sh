#!/usr/bin/env bash
# SmolLM2-shaped decoders on a GPU machine whose image has JAX but no TensorFlow (Keras 3 on
# JAX): the KV-cache kinds' decode speed (2,048 to 8,192 tokens), benchmarks/kv_cache.py's toy
# model at 32,768 tokens, and ours against keras-hub's Llama3CausalLM (prefill at 2,048 tokens;
# decode at 2,048 and 8,192 cached tokens; batch 1 and 16).
#
#   # on a machine with internet, once: the wheels the image lacks (this machine's .venv versions)
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
#     -d .whl keras==3.15.1 namex==0.1.0 optree==0.20.0 keras-hub==0.32.0
#   # on the GPU machine, with .whl copied along:
#   bash benchmarks/decoder_gpu.sh
#
# Each part's limit in seconds: KV_SECONDS, TOY_SECONDS, HUB_SECONDS (0 skips the part).
# Writes under $OUT: hub/ and kv/ (benchmarks/decoder_speed.py's json and md), kv32k/
# (benchmarks/kv_cache.py's json, md and plot) and gpu.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" KERAS_BACKEND=jax PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import jax, keras, keras_hub; print('jax', jax.__version__, jax.devices(), 'keras', keras.__version__, 'keras-hub', keras_hub.__version__)"
  # The KV-cache kinds first, then the toy model at 32K, then ours against keras-hub: a run cut
  # short by its time limit keeps the parts that matter most.
  start=$(date +%s)
  [ "${KV_SECONDS:-300}" = 0 ] || timeout "${KV_SECONDS:-300}" python3 benchmarks/decoder_speed.py --part kv --backends jax \
    --contexts 2048,4096,8192 --batches "${KV_BATCHES:-1,16}" --latents "${LATENTS:-}" \
    --steps 32 --repeats 5 --output "$OUT/kv"
  echo "kv part: $(( $(date +%s) - start )) s"; start=$(date +%s)
  [ "${TOY_SECONDS:-120}" = 0 ] || timeout "${TOY_SECONDS:-120}" python3 benchmarks/kv_cache.py --backends jax --repeats 5 \
    --steps 32 --batch 8 --contexts 32768 --output "$OUT/kv32k"
  echo "toy 32K part: $(( $(date +%s) - start )) s"; start=$(date +%s)
  [ "${HUB_SECONDS:-150}" = 0 ] || timeout "${HUB_SECONDS:-150}" python3 benchmarks/decoder_speed.py --part hub --backends jax \
    --prefill 2048 --contexts 2048,8192 --batches 1,16 --steps 32 --repeats 5 --output "$OUT/hub"
  echo "hub part: $(( $(date +%s) - start )) s"
} 2>&1 | tee "$OUT/gpu.log"
