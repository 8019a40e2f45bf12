"""calibo: ask/tell hyperparameter optimization from conformally calibrated surrogates."""

__version__ = "0.1.0"
