"""torchrun entry for the two-process tests: the real `cheaptune train`, with the rank-aware checkpoint
save (train.distributed.save_checkpoint_all_ranks) in place of the single-process one until the trainer
calls it itself."""

import sys

from cheaptune.cli.main import main
from cheaptune.train import trainer
from cheaptune.train.distributed import save_checkpoint_all_ranks

trainer.AtomicSFTTrainer._save_checkpoint = save_checkpoint_all_ranks

if __name__ == "__main__":
    main(sys.argv[1:])
