"""The training loop: `Trainer` (rollout -> batch -> advantages -> old log-probs -> epochs of
whole-set minibatches -> record), dynamic sampling (sampling), the update (update, forward,
optim), seeds and the KL reference (setup), checks before any work (preflight), processes
(distributed) and the metrics a step computes (metrics). What a run writes is srpo.record."""
