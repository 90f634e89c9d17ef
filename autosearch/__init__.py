"""autosearch: autotuning deep-learning kernels on Apache TVM."""

__version__ = "0.1.0"
