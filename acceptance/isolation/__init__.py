"""Where the code under test runs: worker processes, the typed protocol between them and the runner, the fork
server they start from, how tensors cross, the import check of a spec's references, declared callable kinds."""
