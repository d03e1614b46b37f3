"""`openrlhf-speed bench`: time-to-accuracy of curricula side by side (run.py drives the
training runs, report.py turns their logs into tables and plots, aggregate.py folds several
runs per curriculum into one row and computes a rule's target, claims.py checks the paper's)."""
