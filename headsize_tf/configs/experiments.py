"""Registered Model Garden experiments (`official.core.exp_factory`).

* `headsize_bert/pretraining`: masked-LM pretraining (Model Garden's
  `MaskedLMTask`, no next-sentence head) of a `HeadsizeEncoderConfig` encoder.
* `headsize_bert/sentence_prediction`: classification fine-tuning
  (`SentencePredictionTask`).
* `headsize_bert/sentence_prediction_text`: the same from raw text (TFDS
  `glue/sst2`, `glue/mnli`, ...; Model Garden's `SentencePredictionTextDataConfig`
  tokenises with a WordPiece vocab inside the input pipeline).
* `headsize_bert/span_labeling`: SQuAD v1.1 question answering (Model
  Garden's `QuestionAnsweringTask` with `BertSpanLabeler`; data from
  `headsize-tf data squad`; exact match and F1 from the official script).
* `headsize_lm/language_modeling`: causal LM with a `HeadsizeCausalLM`
  (`headsize_tf.configs.language_modeling`).
* `headsize_seq2seq/translation`: encoder-decoder translation with a
  `HeadsizeSeq2Seq` (`headsize_tf.configs.translation`; TFDS wmt14_translate).

YAML files in `official_configs/` set the sizes; `${DATA_DIR}` in an
`input_path` is replaced by `headsize-tf train --data-dir`.

Importing this module registers the experiments (and Model Garden's BERT
tasks); the task classes of the LM and translation experiments register with
`import headsize_tf.tasks` (which imports these configs, not the reverse:
`headsize_tf.training.train` imports both before `task_factory.get_task`).
"""

from __future__ import annotations

from official.core import config_definitions as cfg
from official.core import exp_factory, registry
from official.modeling import optimization
from official.nlp.configs import bert
from official.nlp.data import (
    pretrain_dataloader,
    question_answering_dataloader,
    sentence_prediction_dataloader,
)
from official.nlp.tasks import masked_lm, question_answering, sentence_prediction

from headsize_tf.configs import language_modeling, translation
from headsize_tf.configs.encoders import encoder_config

EXPERIMENTS = (
    "headsize_bert/pretraining",
    "headsize_bert/sentence_prediction",
    "headsize_bert/sentence_prediction_text",
    "headsize_bert/span_labeling",
    "headsize_lm/language_modeling",
    "headsize_seq2seq/translation",
)


def _trainer(learning_rate: float = 1e-4) -> cfg.TrainerConfig:
    return cfg.TrainerConfig(
        train_steps=100000,
        validation_steps=10,
        validation_interval=1000,
        steps_per_loop=100,
        summary_interval=100,
        checkpoint_interval=1000,
        optimizer_config=optimization.OptimizationConfig(
            {
                "optimizer": {
                    "type": "adamw",
                    "adamw": {
                        "weight_decay_rate": 0.01,
                        "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"],
                    },
                },
                "learning_rate": {
                    "type": "polynomial",
                    "polynomial": {
                        "initial_learning_rate": learning_rate,
                        "end_learning_rate": 0.0,
                    },
                },
                "warmup": {"type": "polynomial"},
            }
        ),
    )


def _experiment(task: cfg.TaskConfig, learning_rate: float) -> cfg.ExperimentConfig:
    """An experiment of `task` with our trainer defaults and the data restrictions."""
    return cfg.ExperimentConfig(
        task=task,
        trainer=_trainer(learning_rate),
        restrictions=[
            "task.train_data.is_training != None",
            "task.validation_data.is_training != None",
        ],
    )


def _register(name, factory):
    try:  # Module reloads must not register twice.
        registry.lookup(exp_factory._REGISTERED_CONFIGS, name)
    except LookupError:
        exp_factory.register_config_factory(name)(factory)


def headsize_bert_pretraining() -> cfg.ExperimentConfig:
    """Masked-LM pretraining of a HeadsizeBertEncoder."""
    return _experiment(
        masked_lm.MaskedLMConfig(
            model=bert.PretrainerConfig(encoder=encoder_config(), cls_heads=[]),
            train_data=pretrain_dataloader.BertPretrainDataConfig(use_next_sentence_label=False),
            validation_data=pretrain_dataloader.BertPretrainDataConfig(
                is_training=False, use_next_sentence_label=False
            ),
        ),
        1e-4,
    )


def headsize_bert_sentence_prediction() -> cfg.ExperimentConfig:
    """Sentence classification fine-tuning of a HeadsizeBertEncoder."""
    return _experiment(
        sentence_prediction.SentencePredictionConfig(
            model=sentence_prediction.ModelConfig(encoder=encoder_config()),
            train_data=sentence_prediction_dataloader.SentencePredictionDataConfig(),
            validation_data=sentence_prediction_dataloader.SentencePredictionDataConfig(
                is_training=False, drop_remainder=False
            ),
        ),
        3e-5,
    )


def headsize_bert_sentence_prediction_text() -> cfg.ExperimentConfig:
    """Sentence classification from raw text (TFDS glue/sst2, glue/mnli, ...)."""
    text = sentence_prediction_dataloader.SentencePredictionTextDataConfig
    return _experiment(
        sentence_prediction.SentencePredictionConfig(
            model=sentence_prediction.ModelConfig(encoder=encoder_config()),
            train_data=text(tfds_name="glue/sst2", tfds_split="train", text_fields=["sentence"]),
            validation_data=text(
                tfds_name="glue/sst2",
                tfds_split="validation",
                text_fields=["sentence"],
                is_training=False,
                drop_remainder=False,
            ),
        ),
        3e-5,
    )


def headsize_bert_span_labeling() -> cfg.ExperimentConfig:
    """SQuAD v1.1 span labeling with a HeadsizeBertEncoder."""
    qa = question_answering_dataloader.QADataConfig
    return _experiment(
        question_answering.QuestionAnsweringConfig(
            model=question_answering.ModelConfig(encoder=encoder_config()),
            train_data=qa(input_path="${DATA_DIR}/squad/train.tf_record"),
            validation_data=qa(
                input_path="${DATA_DIR}/squad/dev-v1.1.json",
                vocab_file="${DATA_DIR}/squad/vocab.txt",
                is_training=False,
                drop_remainder=False,
            ),
        ),
        8e-5,
    )


def headsize_seq2seq_translation() -> cfg.ExperimentConfig:
    """WMT14 translation with a HeadsizeSeq2Seq (Cordonnier et al.'s NMT setup)."""
    return _experiment(
        translation.TranslationConfig(
            train_data=translation.TranslationDataConfig(tfds_split="train"),
            validation_data=translation.TranslationDataConfig(
                tfds_split="validation", is_training=False, drop_remainder=False
            ),
        ),
        7e-4,
    )


def headsize_lm_language_modeling() -> cfg.ExperimentConfig:
    """Causal language modeling with a HeadsizeCausalLM (Bhojanapalli et al.'s LM1B setup)."""
    return _experiment(
        language_modeling.LanguageModelingConfig(),
        1e-3,
    )


_register("headsize_bert/pretraining", headsize_bert_pretraining)
_register("headsize_lm/language_modeling", headsize_lm_language_modeling)
_register("headsize_bert/sentence_prediction", headsize_bert_sentence_prediction)
_register("headsize_bert/sentence_prediction_text", headsize_bert_sentence_prediction_text)
_register("headsize_bert/span_labeling", headsize_bert_span_labeling)
_register("headsize_seq2seq/translation", headsize_seq2seq_translation)

__all__ = ["EXPERIMENTS"]
