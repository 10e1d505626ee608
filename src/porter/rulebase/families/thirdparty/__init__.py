"""What the third-party rules (TP1xx-TP7xx) share: uses of a package's names, flash-attn's
functions, Hugging Face names, and the builds and imports of compiled CUDA extensions."""
