"""The planner: candidates -> estimates -> cost -> choose -> explain, as pure functions."""
