"""The optimizer recipe: schedules, LARS, the gradient path, the gradient noise scale."""
