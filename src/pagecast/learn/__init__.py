"""Learned page predictors: datasets from traces, LSTM/Transformer models, training, inference.

Importing this package does not import torch; ``dataset`` needs only numpy and numba.
"""
