"""Estimates before spending money: memory (simulated training step), throughput, cost.

Importing this package is cheap (no torch); `estimate.memory` is the public memory API.
"""
