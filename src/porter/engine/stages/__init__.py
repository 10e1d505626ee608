"""One file through the engine: the stage for its kind (Python source, notebook, text),
and the Python stage's parts: segments, the rule pass, the per-file context, notes."""
