"""Outputs of the detector: BINEvents, dead letters and late records."""
