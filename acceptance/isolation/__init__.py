"""Where the code under test runs: worker processes, the typed protocol between them and the runner, the fork
server they start from, how tensors cross, the import check of a spec's references, declared callable kinds."""

#: torch's intra-op threads in a worker unless told otherwise: one, so that a CPU callable's result (a
#: reduction's order can follow the thread count) is the same on every machine and for any ``--jobs``, and N
#: jobs on N cores do not oversubscribe them.
WORKER_THREADS = 1

#: The run's own files in its output folder: the journal of finished cases and the lock. A worker watching the
#: folder for the code under test's writes leaves these alone.
JOURNAL = "journal.jsonl"
LOCK = ".acceptance.lock"
RUN_FILES = frozenset({JOURNAL, LOCK})
