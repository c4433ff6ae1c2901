from django import template

from dashboard.cluster import this_process as _this_process

register = template.Library()


@register.simple_tag
def this_process() -> str:
    """`<node>/<pid>` of the process rendering the page."""
    return _this_process()
