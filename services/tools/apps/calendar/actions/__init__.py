"""Google Calendar v3 operations as plain functions over a world.

Each function takes the :class:`~services.tools.context.WorldContext` first and returns the
API's JSON resource, or raises :class:`GoogleError`. The acting identity is the world's agent
(its primary calendar's id is its email; ``"primary"`` names it) unless ``as_email`` names a
colleague (NPCs sending invitations, answering them, moving meetings). Writes are recorded with
``ctx.record("calendar", "events.insert" | ..., ...)``.

Model: an event lives in its organizer's calendar; attendees see it in their own calendar via
their attendee entry, and answer it by patching their own ``responseStatus`` there. Recurring
events (``RRULE`` with FREQ DAILY / WEEKLY / MONTHLY, INTERVAL, COUNT, UNTIL, BYDAY) are
expanded by ``singleEvents=true``; single instances can be read but not modified.

One module per resource of the v3 reference (``calendars`` with the world's set-up, ``events``
writes, ``reads`` for list, instances and free/busy) over ``rrules`` (recurrence expansion) and
``_base`` (time parsing, zones, paging); this package re-exports every name, so callers keep
using ``actions.<operation>``.
"""

from __future__ import annotations

from services.tools.apps.calendar.actions import _base, calendars, events, reads, rrules
from services.tools.apps.calendar.actions._base import (
    APP,
    DEFAULT_RESULTS,
    MAX_INSTANCES,
    MAX_RESULTS,
    parse_time,
)
from services.tools.apps.calendar.actions.calendars import (
    DEFAULT_AGENT,
    calendar_json,
    calendar_list,
    calendar_list_delete,
    calendar_list_get,
    calendar_list_insert,
    create_calendar,
    delete_calendar,
    get_calendar,
    insert_calendar,
    meta,
    patch_calendar,
    setup_calendar,
)
from services.tools.apps.calendar.actions.events import (
    delete_event,
    event_json,
    get_event,
    insert_event,
    move_event,
    overridden_instances,
    patch_event,
    update_event,
)
from services.tools.apps.calendar.actions.reads import (
    event_instances,
    free_busy,
    list_events,
)
from services.tools.apps.packages import names_of

__all__ = [
    "APP",
    "DEFAULT_AGENT",
    "DEFAULT_RESULTS",
    "MAX_INSTANCES",
    "MAX_RESULTS",
    "calendar_json",
    "calendar_list",
    "calendar_list_delete",
    "calendar_list_get",
    "calendar_list_insert",
    "create_calendar",
    "delete_calendar",
    "delete_event",
    "event_instances",
    "event_json",
    "free_busy",
    "get_calendar",
    "get_event",
    "insert_calendar",
    "insert_event",
    "list_events",
    "meta",
    "move_event",
    "overridden_instances",
    "parse_time",
    "patch_calendar",
    "patch_event",
    "setup_calendar",
    "update_event",
]


# a name the package does not export (actions._get, actions.plain ...), from its modules
__getattr__ = names_of(__name__, (_base, calendars, rrules, events, reads))
