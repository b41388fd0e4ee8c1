"""Estimates before spending money: memory (memory/: simulated training step), time (time/: step time,
throughput), cost (cost/: dollars, spot). Policy and settings, which all three read, stay on top.

Importing this package is cheap (no torch); `estimate.memory.memory` is the public memory API.
"""
