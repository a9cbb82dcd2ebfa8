"""Slack MCP tools, named as the reference Slack MCP server names them (``slack_*``).

Each tool is its arguments model (its docstring the description), passed on to the action
with the public server's argument names mapped to the Slack API's (``channel_id`` is the
API's ``channel``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from services.tools.apps.slack import actions as slack
from services.tools.apps.slack import search as slack_search
from services.tools.context import WorldContext
from services.tools.mcp.registry import forward, tool

CHANNEL = {"channel_id": "channel"}


class ListChannels(BaseModel):
    """List public channels in the workspace, with pagination."""

    limit: int = Field(100, ge=1, le=200, description="Channels per page (max 200).")
    cursor: str | None = Field(None, description="next_cursor from the previous page.")


class PostMessage(BaseModel):
    """Post a new message to a Slack channel."""

    channel_id: str = Field(description="The channel to post to (id such as C0123, or #name).")
    text: str = Field(description="The message text (Slack mrkdwn; mention with <@U123>).")


class ReplyToThread(BaseModel):
    """Reply to a specific message thread in Slack."""

    channel_id: str = Field(description="The channel containing the thread.")
    thread_ts: str = Field(description="The ts of the parent message, e.g. 1718000000.000100.")
    text: str = Field(description="The reply text.")


class AddReaction(BaseModel):
    """Add a reaction emoji to a message."""

    channel_id: str = Field(description="The channel containing the message.")
    timestamp: str = Field(description="The ts of the message to react to.")
    reaction: str = Field(description="The emoji name, without colons (e.g. thumbsup).")


class ChannelHistory(BaseModel):
    """Get recent messages from a channel, newest first."""

    channel_id: str = Field(description="The channel id (or #name).")
    limit: int = Field(10, ge=1, le=999, description="Number of messages to return.")
    cursor: str | None = Field(None, description="next_cursor from the previous page.")


class ThreadReplies(BaseModel):
    """Get all replies in a message thread (the parent first)."""

    channel_id: str = Field(description="The channel containing the thread.")
    thread_ts: str = Field(description="The ts of the parent message.")


class GetUsers(BaseModel):
    """Get a list of all users in the workspace with their basic profile information."""

    cursor: str | None = Field(None, description="next_cursor from the previous page.")
    limit: int = Field(100, ge=1, le=200, description="Users per page (max 200).")


class UserProfile(BaseModel):
    user_id: str = Field(description="The user's id, e.g. U0123.")


class SearchMessages(BaseModel):
    """Search messages the user can see, with Slack's search modifiers."""

    query: str = Field(
        description='Slack search syntax: words, "phrases", in:#channel, from:@user, '
        "after:/before:/on:YYYY-MM-DD, -excluded."
    )
    count: int = Field(20, ge=1, le=100, description="Results per page.")
    page: int = Field(1, ge=1, description="1-based page number.")


class JoinChannel(BaseModel):
    """Join a public channel (needed before posting to it)."""

    channel_id: str = Field(description="The public channel to join.")


class OpenDM(BaseModel):
    """Open (or find) a direct message conversation; returns its channel id."""

    user_ids: list[str] = Field(description="One user id for a DM, several for a group DM.")


forward(
    "slack",
    "slack_list_channels",
    ListChannels,
    slack.conversations_list,
    read_only=True,
    exclude_archived=True,
)
forward("slack", "slack_post_message", PostMessage, slack.post_message, rename=CHANNEL)
forward("slack", "slack_reply_to_thread", ReplyToThread, slack.post_message, rename=CHANNEL)
forward(
    "slack",
    "slack_add_reaction",
    AddReaction,
    slack.reactions_add,
    rename={**CHANNEL, "reaction": "name"},
)
forward(
    "slack",
    "slack_get_channel_history",
    ChannelHistory,
    slack.conversations_history,
    read_only=True,
    rename=CHANNEL,
)
forward(
    "slack",
    "slack_get_thread_replies",
    ThreadReplies,
    slack.conversations_replies,
    read_only=True,
    rename={**CHANNEL, "thread_ts": "ts"},
)
forward("slack", "slack_get_users", GetUsers, slack.users_list, read_only=True)


@tool("slack", "slack_get_user_profile", UserProfile, read_only=True)
def user_profile(ctx: WorldContext, a: UserProfile) -> Any:
    """Get detailed profile information for a specific user."""
    return slack.users_info(ctx, user=a.user_id)["user"]


forward(
    "slack",
    "slack_search_messages",
    SearchMessages,
    slack_search.search_messages,
    read_only=True,
)
forward("slack", "slack_join_channel", JoinChannel, slack.conversations_join, rename=CHANNEL)
forward("slack", "slack_open_dm", OpenDM, slack.conversations_open, rename={"user_ids": "users"})
