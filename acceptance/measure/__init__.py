"""Measuring one case: the trial engine, the metrics folded over trials, per-element diagnosis, peers' gates,
run-to-run determinism, cached references and the measurement memo, the bench's timing loop."""
