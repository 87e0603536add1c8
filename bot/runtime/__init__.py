"""Layer 1, runtime: the process's plumbing that knows nothing of handoffs.

The clock, the in-process message bus, per-key locks, background tasks, metrics, logging,
data-directory paths, text sanitising, rate limits and signed HTTP. Imports only
bot.errors and third-party libraries.
"""
