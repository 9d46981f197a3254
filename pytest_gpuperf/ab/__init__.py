"""`gpuperf ab` and `gpuperf bisect`: sessions of two stacks run in pairs and judged paired (above core, below cli)."""
