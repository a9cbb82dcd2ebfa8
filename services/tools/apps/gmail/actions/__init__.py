"""Gmail's operations as plain functions over a :class:`WorldContext`.

Routes, the MCP server, NPCs, scenario effects and oracle solvers all call these, so every
path through the app obeys the same rules: messages are immutable except their labels, a
thread is found from ``threadId`` or the References / In-Reply-To headers, every change bumps
the mailbox ``historyId`` and lands in ``history.list``, and every write is recorded in the
world's action log.

One module per resource (``labels``, ``messages``, ``threads``, ``drafts``, ``changes`` for
history) over ``account`` (the mailbox) and ``_base`` (constants, errors); the MIME codec
(``mime``) and the query language (``search``) sit beside the package. It re-exports every
name, so callers keep using ``actions.<operation>``.
"""

from __future__ import annotations

from services.tools.apps.gmail.actions import (
    _base,
    account,
    changes,
    drafts,
    labels,
    messages,
    threads,
)
from services.tools.apps.gmail.actions._base import (
    APP,
    DEFAULT_ADDRESS,
    FIXED_LABELS,
    HIDDEN_SYSTEM,
    MAX_BATCH,
    SYSTEM_LABELS,
    GmailError,
    error_body,
    not_found,
)
from services.tools.apps.gmail.actions.account import (
    check_user,
    mailbox,
    profile,
    setup_mailbox,
)
from services.tools.apps.gmail.actions.changes import (
    history,
)
from services.tools.apps.gmail.actions.drafts import (
    create_draft,
    delete_draft,
    draft_json,
    get_draft_row,
    list_drafts,
    send_draft,
    update_draft,
)
from services.tools.apps.gmail.actions.labels import (
    create_label,
    delete_label,
    label_id_by_name,
    label_json,
    list_labels,
    search_env,
    update_label,
)
from services.tools.apps.gmail.actions.messages import (
    attachment,
    batch_delete,
    batch_modify,
    delete_message,
    deliver,
    get_message_row,
    insert,
    message_json,
    modify,
    search,
    send,
    store_message,
    thread_rows,
    trash,
    untrash,
)
from services.tools.apps.gmail.actions.threads import (
    delete_thread,
    get_thread_rows,
    list_threads,
    modify_thread,
    thread_json,
    trash_thread,
)
from services.tools.apps.packages import names_of

__all__ = [
    "APP",
    "DEFAULT_ADDRESS",
    "FIXED_LABELS",
    "GmailError",
    "HIDDEN_SYSTEM",
    "MAX_BATCH",
    "SYSTEM_LABELS",
    "attachment",
    "batch_delete",
    "batch_modify",
    "check_user",
    "create_draft",
    "create_label",
    "delete_draft",
    "delete_label",
    "delete_message",
    "delete_thread",
    "deliver",
    "draft_json",
    "error_body",
    "get_draft_row",
    "get_message_row",
    "get_thread_rows",
    "history",
    "insert",
    "label_id_by_name",
    "label_json",
    "list_drafts",
    "list_labels",
    "list_threads",
    "mailbox",
    "message_json",
    "modify",
    "modify_thread",
    "not_found",
    "profile",
    "search",
    "search_env",
    "send",
    "send_draft",
    "setup_mailbox",
    "store_message",
    "thread_json",
    "thread_rows",
    "trash",
    "trash_thread",
    "untrash",
    "update_draft",
    "update_label",
]


# a name the package does not export (actions._get, actions.plain ...), from its modules
__getattr__ = names_of(__name__, (_base, account, labels, messages, threads, drafts, changes))
