"""Every decision: criteria and verdicts, waivers, comparing runs, proposed thresholds, the assertion."""
