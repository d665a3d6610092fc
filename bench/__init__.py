"""``distgnn-bench``: measurements printed as tables and written as JSON."""
