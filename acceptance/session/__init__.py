"""The one run: loading specs, the case loop behind an executor, deciding, writing results.json and the reports;
the library calls built on it (dual_delta, tune, compare, bench)."""
