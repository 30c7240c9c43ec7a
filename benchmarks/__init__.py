"""Benchmarks and replay sweeps."""
