"""Running one attempt: from a delivery to an ``Outcome``, whatever pool runs it.

``runner.py`` decodes a delivery and calls its task under its time limit
(``timelimit.py``), with ``attempt.py``'s preparation, ``progress.py``'s writer
and ``reporting.py``'s error reports; ``outcome.py`` is what an attempt leaves
and the retry policy that decides it.
"""
