"""Was the cheap run good enough? Tuned against base on held-out data: loss, answers, labels, JSON."""
