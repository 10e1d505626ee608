"""Touchpoints: every CUDA-only construct of the tree, and what became of it (the ledger):
its data (ledger_data), which files can hold one (ledger_triggers), finding them with ast
(ledger_scan) and the accounting (ledger)."""
