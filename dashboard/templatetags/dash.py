"""Display filters for the dashboard partials (numbers, times, durations)."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

NONE = "—"


@register.filter
def ms(value) -> str:
    """12.3 → '12.3 ms', 1534.0 → '1.53 s', None → '—'."""
    if value is None or value == "":
        return NONE
    value = float(value)
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    return f"{value:.1f} ms"


@register.filter
def when(value) -> str:
    """An ISO-8601 UTC string → 'YYYY-MM-DD HH:MM:SS'."""
    if not value:
        return NONE
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return str(value)


@register.filter
def clock(value) -> str:
    """An ISO-8601 UTC string → 'HH:MM:SS' (for dense tables)."""
    if not value:
        return NONE
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).strftime("%H:%M:%S")
    except ValueError:
        return str(value)


@register.filter
def duration(seconds) -> str:
    """3725 → '1h 2m', 42.5 → '42s', None → '—'."""
    if seconds is None or seconds == "":
        return NONE
    s = int(float(seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {s}s"
    return f"{s}s"


@register.filter
def percent(value) -> str:
    """A ratio 0..1 as a whole percentage; '' for none."""
    if not isinstance(value, int | float):
        return ""
    return f"{value * 100:.0f} %"


@register.filter
def orblank(value) -> str:
    """None / '' / [] → '—'; lists joined with ', '."""
    if value is None or value == "" or value == []:
        return NONE
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


@register.filter
def breakable(value) -> SafeString:
    """An identifier that may wrap after its separators (`weighted_round_robin`,
    `router:ab12:`), never inside a word: escaped, then a <wbr> after each _ : -."""
    text = str(escape("" if value is None else value))
    for sep in ("_", ":", "-"):
        text = text.replace(sep, sep + "<wbr>")
    return mark_safe(text)


@register.filter
def ident(value) -> SafeString:
    """A name kept on one line (`team-a`, a backend, a model): in a column too
    narrow for it, cut with an ellipsis and whole in its tooltip; never broken
    at a hyphen as prose would be. Escaped."""
    text = escape("" if value is None else value)
    return mark_safe(f'<span class="ident" title="{text}">{text}</span>')


@register.filter
def idents(values) -> SafeString:
    """Names, each an `ident`, a line breaking only between them; none → '—'."""
    if not values:
        return mark_safe(NONE)
    *head, last = [ident(v) for v in values]
    # Each comma rides with its name: a line never starts with one.
    return mark_safe("".join(f'<span class="nowrap">{name},</span> ' for name in head) + last)
