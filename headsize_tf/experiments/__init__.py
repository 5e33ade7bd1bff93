"""Experiment drivers (training) on top of configs and modeling."""
