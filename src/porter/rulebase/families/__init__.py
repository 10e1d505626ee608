"""What one family of rules shares: its tables, its matching, its syntax."""
