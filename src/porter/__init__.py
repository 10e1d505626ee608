"""porter: port CUDA-only PyTorch code to MPS and CPU, unchanged on CUDA."""
__version__ = "0.1.0"
