"""The repository model: its modules, manifests, CUDA-only packages, the runtime's home and the ledger."""
