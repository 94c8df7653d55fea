"""Stochastic Generative Hashing: learned binary codes for Hamming-distance retrieval."""

__version__ = "0.1.0"
