"""Benchmarks of rollouts: sandbox throughput, pipeline overlap, service data path, memory.

Run `python -m benchmarks [--quick]` from the repository root (see docs/performance.md).
"""
