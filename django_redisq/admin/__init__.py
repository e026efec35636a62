"""The admin: thin views over ``django_redisq.ops`` (reads through the Inspector, changes through Operations).

``site.py`` registers the ``DeadLetter`` admin (Django's autodiscovery imports
this package); ``common.py`` holds what every change view shares; ``cancel.py``,
``edit.py`` and ``pause.py`` are the change views beyond the dead-letter list;
``index.py`` lists every page (Queues, Pending, ..., Schedules) on the admin index.
"""

from django_redisq.admin import index as index  # registers the index entries of the other pages
from django_redisq.admin import site as site  # registers DeadLetterAdmin
