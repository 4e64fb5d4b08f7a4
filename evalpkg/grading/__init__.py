"""Grading a result against the gold: the comparator (rules in its docstring), the gold cache and
`execution_match`, shared by the run's scoring and the test set's own checks (annotation, traps,
premises), so both grade alike."""
