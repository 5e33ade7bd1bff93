"""Training below the tools: experiment runs, trained model_dirs, fine-tuning.

* `train`: `run` (Model Garden's trainer with resumable input), strategies,
  `load_trained_model` of a `headsize-tf train` model_dir.
* `finetune`: the sentence-classification fine-tuning loop and length
  batching shared by the pruning tool and the studies.
"""
