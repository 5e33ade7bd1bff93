"""Training below the tools: experiment runs, trained model_dirs, fine-tuning.

* `train`: `run` (Model Garden's trainer with resumable input), strategies,
  `load_trained_model` of a `headsize-tf train` model_dir.
* `finetune`: the sentence-classification fine-tuning loop and length
  batching shared by the pruning tool and the studies.
* `evaluation`: the tf_keras front's one `perplexity` (causal LM, translation
  with padding left out, masked LM by per-token weights), shared by the tools.
"""
