"""Slack's operations as plain functions over a world (routes, MCP tools, NPCs, oracles).

Each function takes the :class:`~services.tools.context.WorldContext` first and returns the
JSON Slack's Web API would (without the ``ok`` wrapper), or raises :class:`SlackError` with
Slack's error code. The acting user is the world's agent user unless ``as_user`` names another
(NPCs and scenario set-up post as colleagues). Every write is recorded with ``ctx.record`` under
the Slack method name (``chat.postMessage``, ...), so events can trigger on it.

Identifiers: users ``U…``, channels ``C…`` (public and private), IMs ``D…``, group IMs ``G…``,
files ``F…``, scheduled messages ``Q…``; message ids are ``ts`` strings (``"1718000000.000100"``)
from the world's simulated clock, strictly increasing per world (:func:`next_ts`).

One module per Web API family (``users``, ``conversations``, ``chat``, ``reactions`` with pins,
``files``) over ``team`` (the workspace set-up, actors, membership) and ``_base`` (ids, cursors,
paging); this package re-exports them, so callers keep using ``actions.<method>``.
"""

from __future__ import annotations

from services.tools.apps.packages import names_of
from services.tools.apps.slack.actions import (
    _base,
    chat,
    conversations,
    files,
    reactions,
    team,
    users,
)
from services.tools.apps.slack.actions._base import (
    APP,
    DEFAULT_AGENT,
    MAX_TEXT,
    SCHEDULE_HORIZON,
    normalize_ts,
)
from services.tools.apps.slack.actions.chat import (
    conversations_history,
    conversations_replies,
    delete_message,
    delete_scheduled,
    deliver_due,
    get_permalink,
    post_message,
    schedule_message,
    scheduled_list,
    update_message,
)
from services.tools.apps.slack.actions.conversations import (
    conversations_archive,
    conversations_create,
    conversations_info,
    conversations_invite,
    conversations_join,
    conversations_kick,
    conversations_leave,
    conversations_list,
    conversations_members,
    conversations_open,
    conversations_rename,
    conversations_set_text,
    conversations_unarchive,
    users_conversations,
)
from services.tools.apps.slack.actions.files import (
    file_bytes,
    files_complete_upload,
    files_get_upload_url,
    files_info,
    files_list,
    files_receive_upload,
    files_upload,
)
from services.tools.apps.slack.actions.reactions import (
    pins_add,
    pins_list,
    pins_remove,
    reactions_add,
    reactions_get,
    reactions_remove,
)
from services.tools.apps.slack.actions.team import (
    agent_user_id,
    create_user,
    next_ts,
    setup_workspace,
    workspace,
)
from services.tools.apps.slack.actions.users import (
    auth_test,
    users_info,
    users_list,
    users_lookup_by_email,
)

__all__ = [
    "APP",
    "DEFAULT_AGENT",
    "MAX_TEXT",
    "SCHEDULE_HORIZON",
    "agent_user_id",
    "auth_test",
    "conversations_archive",
    "conversations_create",
    "conversations_history",
    "conversations_info",
    "conversations_invite",
    "conversations_join",
    "conversations_kick",
    "conversations_leave",
    "conversations_list",
    "conversations_members",
    "conversations_open",
    "conversations_rename",
    "conversations_replies",
    "conversations_set_text",
    "conversations_unarchive",
    "create_user",
    "delete_message",
    "delete_scheduled",
    "deliver_due",
    "file_bytes",
    "files_complete_upload",
    "files_get_upload_url",
    "files_info",
    "files_list",
    "files_receive_upload",
    "files_upload",
    "get_permalink",
    "next_ts",
    "normalize_ts",
    "pins_add",
    "pins_list",
    "pins_remove",
    "post_message",
    "reactions_add",
    "reactions_get",
    "reactions_remove",
    "schedule_message",
    "scheduled_list",
    "setup_workspace",
    "update_message",
    "users_conversations",
    "users_info",
    "users_list",
    "users_lookup_by_email",
    "workspace",
]


# a name the package does not export (actions._get, actions.plain ...), from its modules
__getattr__ = names_of(__name__, (_base, team, users, conversations, chat, reactions, files))
