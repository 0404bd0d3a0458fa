"""Cost and capacity: prices with effective dates, waste by cause, capacity attribution (pure)."""
