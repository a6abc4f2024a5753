"""mvflow's benchmarks against the tools users would pick instead (see bench/run.py)."""
