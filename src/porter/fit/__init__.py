"""porter fit: find the largest setting (batch size, ...) that fits in memory."""
