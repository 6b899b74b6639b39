"""One module per rule. Each module registers its rule at import time (see catalogue)."""
