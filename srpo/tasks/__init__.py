"""Task packs: each subpackage is one task family plugged into the core through one
`srpo.packs.TaskPack` (tasks, reward, evaluation success, agent prompts, workflows,
environment): `math` (reasoning-gym, GSM8K, MATH-500), `search` (multi-turn retrieval) and
`testbed` (cover tasks for the objective). `dataset_files` reads their JSONL / Parquet files.

The core imports none of them; they are found by the entry points of group "srpo.task_packs"
(pyproject.toml). See docs/architecture.md.
"""
