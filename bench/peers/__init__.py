"""One module per system under test, each run by that system's own interpreter."""
