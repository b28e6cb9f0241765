"""accumlint: a static checker for gradient-accumulation bugs in PyTorch training code."""

__version__ = "0.3.0"
