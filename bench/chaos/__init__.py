"""The fault-injection run: K worker processes, kill -9 and SIGTERM on a timeline, the store
restarted mid-run, every body recording its runs in a ledger outside the store (docs/chaos.md)."""
