"""`openrlhf-speed bench`: time-to-accuracy of curricula side by side (run.py drives the
training runs, report.py turns their logs into tables and plots)."""
