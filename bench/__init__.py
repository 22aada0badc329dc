"""The side-by-side benchmark: ours and the Python job queues users pick today, same server."""
