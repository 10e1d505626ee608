"""What the dtype rules share: whether a NumPy array is (or is known not to be) float64 (PT605)."""
