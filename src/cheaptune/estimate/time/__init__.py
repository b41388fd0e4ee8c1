"""Time: step time and tokens/s of a job on a GPU layout, from FLOPs per token, measured ceilings and
constants (data/steptime.yaml, mfu_ceilings.yaml, speedups.yaml), communication by sharding over the
real link, and the interval the measured residuals give; GRPO's generation time beside it.
"""
