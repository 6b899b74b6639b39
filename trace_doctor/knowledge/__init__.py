"""Data tables of known failure signatures: error messages, SDK log messages, bad versions."""
