#!/usr/bin/env bash
# The reproduction grid's `gpu` preset (or PRESET=paper: the paper's shapes, width 256 against
# 256 to 512) on a GPU machine whose image
# has JAX but no TensorFlow: the Keras 3 runner (`--framework keras3`, KERAS_BACKEND=jax).
#
#   bash benchmarks/reproduction_device.sh prepare          # with internet: wheels and data into .device/
#   bash benchmarks/reproduction_device.sh run WORKERS RUNS # on the GPU machine, .device/ copied along
#   PRESET=paper bash benchmarks/reproduction_device.sh run 2 4
#
# `prepare` downloads the Keras 3 wheels the image lacks (keras, namex, optree; the versions
# of this machine's .venv) and exports Austen's LM windows at sequence 256 as .npy arrays
# (TensorFlow reads the TFRecords here, once). `run` installs the wheels, trains up to RUNS
# runs per worker with WORKERS workers sharing the GPU (memory grown on demand), and copies
# results/reproduction_v2_$PRESET (run files, README, plots) and the unfinished runs' states
# (work/*_keras3_state.npz) to $OUT; copy them back into the repository's results and
# .device/work. A run cut off by a time limit resumes from its last curve point in the next
# `run` (its state is in .device/work); finished runs are never redone, because the results
# directory holds their files.
# Then `python -m headsize_tf.experiments.attention_rank --runs results/reproduction_v2_paper
# --work-dir .device/work` measures the trained heads' rank (their .keras files, in $OUT/work).
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${PRESET:-gpu}
OUTPUT=results/reproduction_v2_$PRESET

case "${1:-}" in
prepare)
  py=.venv/bin/python
  version() { "$py" -c "import importlib.metadata as m; print(m.version('$1'))"; }
  mkdir -p .device/whl .device/data/seq256/austen
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .device/whl \
    "keras==$(version keras)" "namex==$(version namex)" "optree==$(version optree)"
  "$py" - <<'EOF'
import pathlib, shutil
from headsize_tf.data import corpora
from headsize_tf.experiments import lm_keras3

data = corpora.default_data_dir() / "seq256"
corpora.prepare("austen", data, corpora.PrepareOptions(seq_length=256))
target = pathlib.Path(".device/data/seq256/austen")
for path in lm_keras3.export_lm_arrays(data / "austen") + [data / "austen" / "MANIFEST.json"]:
    shutil.copy2(path, target / path.name)
print("prepared", sorted(p.name for p in target.iterdir()))
EOF
  du -sh .device
  ;;
run)
  workers=${2:?workers}
  runs=${3:?runs per worker}
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .device/whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD" KERAS_BACKEND=jax PYTHONUNBUFFERED=1
  python3 --version  # The wheels are cp312 (the image's Python 3.12).
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
  status=0
  mkdir -p .device/work
  python3 -m headsize_tf.experiments.reproduction --preset "$PRESET" --framework keras3 \
    --output "$OUTPUT" --data-dir .device/data --work-dir .device/work \
    --workers "$workers" --max-runs "$runs" || status=$?
  mkdir -p "${OUT:-/tmp/out}"
  if [ -d "$OUTPUT" ]; then cp -r "$OUTPUT" "${OUT:-/tmp/out}/"; fi
  cp -r .device/work "${OUT:-/tmp/out}/work"
  exit "$status"
  ;;
*)
  echo "usage: $0 prepare | run WORKERS RUNS_PER_WORKER" >&2
  exit 2
  ;;
esac
