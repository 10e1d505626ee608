"""porter_runtime: placeholder, replaced by the runtime implementation."""
__version__ = "0.1.0"
