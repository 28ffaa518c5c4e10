"""Small helpers every layer may use: atomic file writes, argument checks, process settings, plots."""
