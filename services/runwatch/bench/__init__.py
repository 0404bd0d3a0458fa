"""Benchmarks of runwatch's detectors on public labeled data (NAB)."""
