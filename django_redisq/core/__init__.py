"""The vocabulary every layer shares, below the store: the message schema and task metadata, ``Options`` and its
naming rules, fleet-wide limits, retry backoff, partitions, the one clock, redaction and tracing.

Nothing here talks to Redis or reads Django settings at import; everything above may import it.
"""
