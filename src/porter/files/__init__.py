"""Reading the user's files and writing them back: atomic writes, diffs, the ported copy."""
