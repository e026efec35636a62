"""The settings of ``TASKS[alias]["OPTIONS"]``: read into a frozen ``Options`` and checked (read), and their parts:
worker profiles, health thresholds, and the modules a worker imports (discovery).

``Options`` itself, the vocabulary every layer shares, is ``core/options.py``.
"""
