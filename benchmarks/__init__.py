"""Benchmarks of echomq-django against its peers (see README.md here).

A package so the benchmark's job modules are importable by dotted path and
``benchmarks`` can be an installed Django app whose ``jobs.py`` is autodiscovered.
"""
