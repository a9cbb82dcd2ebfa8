"""RL rollouts: batches of tasks x K samples with partial rollout, token-in-token-out records
with per-token policy versions, effort budgets and RL-ready exports (issue 22)."""
