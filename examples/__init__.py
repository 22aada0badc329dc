"""Web apps that stage jobs in their own transactions: FastAPI, Flask and Django, one each.

Each has its jobs in `jobs.py`, worked (and its outbox relayed) by
`ujobs worker examples.NAME.jobs --with-relay`; `tests/examples/` drives each through its
framework's own test client on a real Postgres.
"""
