"""Settling: an ``Outcome`` becomes an ack, a retry or a dead letter, in batches, never lost.

``settler.py`` runs the settle steps in one direction; what else must happen
around them (saved metadata, workflow steps, lifecycle events) plugs in as a
``SettleHook`` (``hooks.py``, ``flows.py``).
"""
