"""How low-rank trained attention is: the spectrum analysis of `headsize-tf analyze spectrum`.

Cordonnier et al. (2020, Fig. 1): the cumulative variance captured by the top
singular values of each head's W_Q^(h) W_K^(h)^T and of the heads'
concatenated keys (`headsize_tf.reparam.spectrum`), computed for every layer
of a pretrained or compressed encoder and written as a plot with its data
(JSON) alongside, both atomically.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import numpy as np

from headsize_tf.core.io import check_output_free, write_atomic


@dataclasses.dataclass(frozen=True)
class SpectrumAnalysis:
    """The curves of every layer and where they were written.

    Attributes:
      source: The encoder's name or checkpoint directory.
      layers: Per layer, cumulative captured-variance curves `per_head`,
        `concatenated_query` and `concatenated_key` (each rising to 1).
      plot: The plot file.
      data: The JSON file (`{"source": ..., "layers": [...]}`) next to it.
    """

    source: str
    layers: list[dict[str, np.ndarray]]
    plot: pathlib.Path
    data: pathlib.Path

    def dimensions_for(self, share: float = 0.9, curve: str = "concatenated_key") -> list[int]:
        """Per layer: the fewest dimensions capturing `share` of the `curve` variance."""
        return [int((layer[curve] < share).sum()) + 1 for layer in self.layers]


def analyze_spectrum(
    output: str | os.PathLike,
    model: str | None = None,
    checkpoint: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> SpectrumAnalysis:
    """Spectra of an encoder (a registry `model` or a `checkpoint` directory).

    Writes the plot to `output` (.png) and the curves to `output` with suffix
    .json, each through a temporary file renamed into place. Both paths are
    checked before the encoder loads (`core.io.check_output_free`): an existing
    one is replaced only with `overwrite`.
    """
    check_output_free(output, overwrite, "file")
    if pathlib.Path(output).suffix == ".json":
        raise ValueError(
            f"Output {output} ends in .json, the suffix of the data written beside the plot; "
            "expected a plot file such as .png."
        )
    data_path = pathlib.Path(output).with_suffix(".json")
    check_output_free(data_path, overwrite, "file")
    from headsize_tf.pretrained import load_sentence_encoder
    from headsize_tf.reparam import spectrum

    source = load_sentence_encoder(model, checkpoint)
    spectra = spectrum.encoder_spectrum(source.encoder)
    plot = spectrum.plot_spectrum(spectra, output, title=source.source)
    layers = [{k: v.tolist() for k, v in layer.items()} for layer in spectra]
    data = write_atomic(
        data_path,
        json.dumps({"source": source.source, "layers": layers}),
    )
    return SpectrumAnalysis(source=source.source, layers=spectra, plot=plot, data=data)
