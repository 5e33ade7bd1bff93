"""A keras-hub text classifier as the pruning driver's `ModelAdapter`."""

from __future__ import annotations

import json
import pathlib

import keras
import numpy as np

from headsize_tf.core.io import atomic_directory
from headsize_tf.keras3.hub.hub_model import HubModel
from headsize_tf.keras3.hub.presets import load_hub_preset
from headsize_tf.keras3.modeling.bert_backbone import BertBackbone
from headsize_tf.keras3.pruning.classifier import (
    LABEL_MAP_FILE,
    REPORT_FILE,
    Keras3ClassifierAdapter,
    with_backbone,
)
from headsize_tf.keras3.pruning.remove import remove_heads


class HubClassifierAdapter(Keras3ClassifierAdapter):
    """`Keras3ClassifierAdapter` over a `HubModel`: the classifier's head travels with the
    model, and the output is the model's own directory (`HubModel.save`: the library's
    layout once heads are removed) with `report.json` and `label_map.json`.

    Args:
      encoder: The `HubModel` (BERT or DistilBERT).
      model: Its classifier (`hub.model`, or a new head on `hub.backbone`).
      importance_data: `(inputs, labels)` of the importance examples.
      dev_data: `(inputs, labels)` of the dev accuracy.
      label_map: {label: class id}, saved with the model.

    Example:

    >>> adapter = HubClassifierAdapter(hub, hub.model, (x, y), (x_dev, y_dev), labels)
    >>> prune_loop(adapter, PruneSchedule(target_fraction=0.3), "pruned")
    """

    def remove_heads(self, mask: np.ndarray) -> HubClassifierAdapter:
        backbone = remove_heads(self.backbone, mask)
        model = with_backbone(self.model, backbone)
        return self._like(self._hub(backbone, model), model)

    def _hub(self, backbone: BertBackbone, model: keras.Model) -> HubModel:
        return self.encoder.with_backbone(backbone).with_head(model.get_layer("logits"))

    def save(self, output, report, overwrite: bool = False) -> pathlib.Path:
        hub = self._hub(self.backbone, self.model)
        with atomic_directory(output, overwrite=overwrite) as written:
            hub.write_into(written)
            (written / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
            (written / LABEL_MAP_FILE).write_text(
                json.dumps(report["label_map"], indent=2, ensure_ascii=False) + "\n"
            )
        return pathlib.Path(output)

    def reload(self, path) -> HubClassifierAdapter:
        hub = load_hub_preset(path)
        return self._like(hub, hub.model)
