"""SRPO on verl 0.9.x (Ray + FSDP/Megatron + vLLM/SGLang): the optional `srpo[verl]` extra.

Importing this package never imports verl; each module that needs verl imports it itself, so
`import srpo` works without the extra. docs/scale-out.md tells how the parts fit together.

    fields       names of the per-output set records (agent loop -> trainer -> worker)
    advantage    set-relative advantage estimator (srpo.set_relative_advantages)
    loss         setwise policy loss (srpo.setwise_policy_loss) and the worker loss hook
    batching     set-preserving layout: whole sets per micro-batch, dp rank and mini-batch
    episode      drives an srpo workflow for one episode with an async generate function
    agent_loop   verl AgentLoopBase running srpo workflows            (imports verl)
    trainer      verl V1 trainer `srpo_sync`: the set-preserving hooks (imports verl)
    plugin       the `verl.plugins` entry point: registers everything  (imports verl)
"""

ADV_ESTIMATORS = ("srpo", "srpo_event")
POLICY_LOSSES = ("srpo", "srpo_pooled", "srpo_member_sum", "srpo_sum", "srpo_seq")
AGENT_LOOP = "srpo_workflow"
TRAINER_MODE = "srpo_sync"
