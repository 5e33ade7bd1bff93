"""Corpora, vocabularies and TFRecords for the experiments."""
