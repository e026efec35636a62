"""Adapters for other Python task queues, run by ``run_peer.py`` in the bench's own virtualenv."""
