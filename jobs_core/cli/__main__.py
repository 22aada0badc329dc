"""`python -m jobs_core.cli`: the same as the `ujobs` command."""

from jobs_core.cli import main

main()
