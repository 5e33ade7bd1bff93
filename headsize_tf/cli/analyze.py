"""`headsize-tf analyze spectrum`: analyses of trained attention."""

from __future__ import annotations

import argparse

from headsize_tf.cli._args import add_model_source


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("analyze", help="analyses of trained attention")
    sub = p.add_subparsers(dest="analysis", metavar="ANALYSIS", required=True)
    spectrum = sub.add_parser(
        "spectrum",
        help="captured variance of W_Q W_K^T per head vs concatenated (Cordonnier Fig. 1)",
    )
    add_model_source(spectrum)
    spectrum.add_argument(
        "--output", required=True, help="plot file (.png); its data alongside (suffix .json)"
    )
    spectrum.add_argument(
        "--overwrite", action="store_true", help="replace an existing plot and its JSON"
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    return {"spectrum": _spectrum}[args.analysis](args)


def _spectrum(args: argparse.Namespace) -> int:
    from headsize_tf.theory.spectrum import analyze_spectrum

    result = analyze_spectrum(
        args.output, model=args.model, checkpoint=args.checkpoint, overwrite=args.overwrite
    )
    for i, (layer, k90) in enumerate(zip(result.layers, result.dimensions_for(0.9), strict=True)):
        print(
            f"layer {i}: 90% of the concatenated key variance in {k90} of "
            f"{len(layer['concatenated_key'])} dimensions"
        )
    print(f"plot: {result.plot}")
    return 0
