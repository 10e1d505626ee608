"""Stand-ins for CUDA-only libraries (apex, bitsandbytes, xformers, adam-atan2) and the
options of libraries that pick CUDA code (transformers' attn_implementation)."""
