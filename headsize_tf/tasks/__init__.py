"""Model Garden tasks (input pipelines, losses, metrics) of the headsize experiments.

Importing this package registers `LanguageModelingTask` and `TranslationTask`
with `official.core.task_factory`; the BERT experiments use Model Garden's
own `masked_lm`, `sentence_prediction` and `question_answering` tasks.
"""

from headsize_tf.tasks.language_modeling import LanguageModelingTask, Perplexity
from headsize_tf.tasks.translation import TranslationTask, pad_pairs, pair_fn, special_ids

__all__ = [
    "LanguageModelingTask",
    "Perplexity",
    "TranslationTask",
    "pad_pairs",
    "pair_fn",
    "special_ids",
]
