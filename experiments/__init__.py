"""Scripts that reproduce the figures and tables of the Results page. Each runs as a module from the repository
root, without path set-up: ``python -m experiments.NAME`` (``--help`` for its options)."""
