"""The migration report: its data, Markdown, JSON, SARIF and the rule documentation."""
