"""Edits beyond one rule's node: the runtime import's placement, unused imports, dead probes."""
