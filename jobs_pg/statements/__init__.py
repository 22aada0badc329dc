"""The driver's SQL, one module per family, each statement named after its driver method."""
