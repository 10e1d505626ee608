"""The command line: parsing flags and printing; the work is done elsewhere."""
