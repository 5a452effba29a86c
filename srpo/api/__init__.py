"""srpo's Python API, in the shape of TRL's trainers (docs/python-api.md).

    from srpo import SRPOConfig, SRPOTrainer

    trainer = SRPOTrainer(model="smollm2", workflow="parallel", reward_funcs=correct,
                          train_dataset=rows, eval_dataset=heldout, method="srpo",
                          args=SRPOConfig(steps=8, lora=True, output_dir="runs/arith"))
    result = trainer.train()   # result.run_dir, result.before / result.after (held-out accuracy)

Modules: trainer (SRPOTrainer: the arguments -> one srpo Config, run by srpo.train's Trainer),
args (SRPOConfig and how its fields become config keys), model, workflow, tasks and rewards
(one argument each: what it may be, and how it reaches the config).
"""

from srpo.api.args import FIELD_KEYS, SRPOConfig
from srpo.api.rewards import RewardFunctionError
from srpo.api.trainer import SRPOTrainer
from srpo.train.trainer import TrainResult

__all__ = ["FIELD_KEYS", "RewardFunctionError", "SRPOConfig", "SRPOTrainer", "TrainResult"]
