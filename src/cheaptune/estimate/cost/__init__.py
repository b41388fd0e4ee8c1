"""Cost: dollars of a run from its time and a price (billing rounding, start-up, storage, egress), and
the expected overhead of spot preemption (Young/Daly checkpoint interval).
"""
