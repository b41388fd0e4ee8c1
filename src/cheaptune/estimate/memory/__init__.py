"""Memory: peak training VRAM per GPU, from two training steps of the model's own Hugging Face class
simulated on fake tensors (or the analytic formula), the trainer profiles and library versions it runs
with, the CUDA-side overheads of data/overheads.yaml, and sharding over N GPUs.
"""
