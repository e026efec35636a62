"""Events' Redis steps (``Topics``, steps.py) and the shapes they hand back (shapes.py)."""

from django_redisq.store.topics.shapes import (
    MAX_ID_SEQ,
    Entry,
    GroupStats,
    NoSuchGroup,
    Read,
    Regrouped,
    Trimmed,
    before,
    id_ms,
)
from django_redisq.store.topics.steps import BATCH, LAG_SCAN_MAX, NOGROUP, Topics, warn_regrouped

__all__ = ["BATCH", "LAG_SCAN_MAX", "MAX_ID_SEQ", "NOGROUP", "Entry", "GroupStats", "NoSuchGroup", "Read", "Regrouped",
           "Topics", "Trimmed", "before", "id_ms", "warn_regrouped"]
