"""Benchmarks: scripts that print tables, and the experiments they and the tests share.

Run each from the repository root as a module (`python -m bench.<name>`, as `make bench`
does), so that one script imports another as `from bench import heldout`.
"""
