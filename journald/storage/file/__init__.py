"""File backend (placeholder docstring, the format goes here)."""
