"""porter verify: import and run the ported code with CUDA hidden, and map failures."""
