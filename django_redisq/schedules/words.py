"""Schedules in words, as the admin and ``redisq schedules`` show them: "every 5 minutes", "weekdays at 09:00".

Only the common forms are put in words; any other cron expression is shown
as it is, so the words never say something the expression does not.
"""

from __future__ import annotations

DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December")
_DAY_NAMES = {d[:3].lower(): i for i, d in enumerate(DAYS)}
_MONTH_NAMES = {m[:3].lower(): i + 1 for i, m in enumerate(MONTHS)}
_EVEN_MINUTES = {n for n in range(1, 60) if 60 % n == 0}  # */7 restarts at :00, so it is not "every 7 minutes"
_EVEN_HOURS = {n for n in range(1, 24) if 24 % n == 0}


def _units(n: float, unit: str) -> str:
    return f"every {unit}" if n == 1 else f"every {n:g} {unit}s"


def every_in_words(ms: int) -> str:
    """``every`` as "every 30 seconds", "every 5 minutes", "every 2 hours"."""
    if ms % 3_600_000 == 0:
        return _units(ms // 3_600_000, "hour")
    if ms % 60_000 == 0:
        return _units(ms // 60_000, "minute")
    return _units(ms / 1000, "second")


def _number(field: str, low: int, high: int, names: dict[str, int] | None = None) -> int | None:
    value = names.get(field.lower()) if names and field.lower() in names else int(field) if field.isdigit() else None
    return value if value is not None and low <= value <= high else None


def cron_in_words(expr: str) -> str:
    """Common 5-field forms in words ("every minute", "every 5 minutes", "hourly at :15", "daily at 03:00",
    "weekdays at 09:00", "every Monday at 08:30", "monthly on day 1 at 00:00", "yearly on 1 January at 00:00");
    anything else is returned as it is."""
    fields = expr.split()
    if len(fields) != 5:
        return expr
    minute_f, hour_f, dom_f, month_f, dow_f = fields
    if fields == ["*"] * 5:
        return "every minute"
    if minute_f.startswith("*/") and fields[1:] == ["*"] * 4 and minute_f[2:].isdigit() and int(minute_f[2:]) in _EVEN_MINUTES:
        return _units(int(minute_f[2:]), "minute")
    minute = _number(minute_f, 0, 59)
    if minute is None:
        return expr
    if hour_f == "*" and fields[2:] == ["*"] * 3:
        return f"hourly at :{minute:02d}"
    if hour_f.startswith("*/") and fields[2:] == ["*"] * 3 and hour_f[2:].isdigit() and int(hour_f[2:]) in _EVEN_HOURS:
        return _units(int(hour_f[2:]), "hour") + (f" at :{minute:02d}" if minute else "")
    hour = _number(hour_f, 0, 23)
    if hour is None:
        return expr
    at = f"at {hour:02d}:{minute:02d}"
    if (dom_f, month_f) == ("*", "*"):
        if dow_f == "*":
            return f"daily {at}"
        if dow_f.lower() in ("1-5", "mon-fri"):
            return f"weekdays {at}"
        day = _number(dow_f, 0, 7, _DAY_NAMES)
        return f"every {DAYS[day % 7]} {at}" if day is not None else expr
    if dow_f != "*":
        return expr
    dom = _number(dom_f, 1, 31)
    if dom is None:
        return expr
    if month_f == "*":
        return f"monthly on day {dom} {at}"
    month = _number(month_f, 1, 12, _MONTH_NAMES)
    return f"yearly on {dom} {MONTHS[month - 1]} {at}" if month is not None else expr
