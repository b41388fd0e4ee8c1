"""`cheaptune train`: config, peft/bitsandbytes methods, trl SFTTrainer with atomic checkpoints and exact resume."""
