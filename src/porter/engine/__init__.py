"""The migration pipeline: discover, pre-filter, parse, run the rules, collect results."""
