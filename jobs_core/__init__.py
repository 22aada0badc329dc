"""ultimat3-jobs: the contract every backend implements, the worker, and the tools around them."""
