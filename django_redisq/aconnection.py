"""Where ``aclose`` was before the package had layers: ``await django_redisq.aconnection.aclose()`` keeps working.

Its home is ``django_redisq.connection.async_pools``; this module only keeps the
documented path of earlier releases importable, so code written against them
does not break on upgrade.
"""

from django_redisq.connection.async_pools import aclose

__all__ = ["aclose"]
