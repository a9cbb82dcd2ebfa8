"""Slack MCP tools, named as the reference Slack MCP server names them (``slack_*``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from services.tools.apps.slack import actions as slack
from services.tools.apps.slack import search as slack_search
from services.tools.context import WorldContext
from services.tools.mcp.registry import tool


class ListChannels(BaseModel):
    limit: int = Field(100, ge=1, le=200, description="Channels per page (max 200).")
    cursor: str | None = Field(None, description="next_cursor from the previous page.")


@tool("slack", "slack_list_channels", ListChannels, read_only=True)
def list_channels(ctx: WorldContext, a: ListChannels) -> Any:
    """List public channels in the workspace, with pagination."""
    return slack.conversations_list(ctx, cursor=a.cursor, limit=a.limit, exclude_archived=True)


class PostMessage(BaseModel):
    channel_id: str = Field(description="The channel to post to (id such as C0123, or #name).")
    text: str = Field(description="The message text (Slack mrkdwn; mention with <@U123>).")


@tool("slack", "slack_post_message", PostMessage)
def post_message(ctx: WorldContext, a: PostMessage) -> Any:
    """Post a new message to a Slack channel."""
    return slack.post_message(ctx, channel=a.channel_id, text=a.text)


class ReplyToThread(BaseModel):
    channel_id: str = Field(description="The channel containing the thread.")
    thread_ts: str = Field(description="The ts of the parent message, e.g. 1718000000.000100.")
    text: str = Field(description="The reply text.")


@tool("slack", "slack_reply_to_thread", ReplyToThread)
def reply_to_thread(ctx: WorldContext, a: ReplyToThread) -> Any:
    """Reply to a specific message thread in Slack."""
    return slack.post_message(ctx, channel=a.channel_id, text=a.text, thread_ts=a.thread_ts)


class AddReaction(BaseModel):
    channel_id: str = Field(description="The channel containing the message.")
    timestamp: str = Field(description="The ts of the message to react to.")
    reaction: str = Field(description="The emoji name, without colons (e.g. thumbsup).")


@tool("slack", "slack_add_reaction", AddReaction)
def add_reaction(ctx: WorldContext, a: AddReaction) -> Any:
    """Add a reaction emoji to a message."""
    return slack.reactions_add(ctx, channel=a.channel_id, timestamp=a.timestamp, name=a.reaction)


class ChannelHistory(BaseModel):
    channel_id: str = Field(description="The channel id (or #name).")
    limit: int = Field(10, ge=1, le=999, description="Number of messages to return.")
    cursor: str | None = Field(None, description="next_cursor from the previous page.")


@tool("slack", "slack_get_channel_history", ChannelHistory, read_only=True)
def channel_history(ctx: WorldContext, a: ChannelHistory) -> Any:
    """Get recent messages from a channel, newest first."""
    return slack.conversations_history(ctx, channel=a.channel_id, limit=a.limit, cursor=a.cursor)


class ThreadReplies(BaseModel):
    channel_id: str = Field(description="The channel containing the thread.")
    thread_ts: str = Field(description="The ts of the parent message.")


@tool("slack", "slack_get_thread_replies", ThreadReplies, read_only=True)
def thread_replies(ctx: WorldContext, a: ThreadReplies) -> Any:
    """Get all replies in a message thread (the parent first)."""
    return slack.conversations_replies(ctx, channel=a.channel_id, ts=a.thread_ts)


class GetUsers(BaseModel):
    cursor: str | None = Field(None, description="next_cursor from the previous page.")
    limit: int = Field(100, ge=1, le=200, description="Users per page (max 200).")


@tool("slack", "slack_get_users", GetUsers, read_only=True)
def get_users(ctx: WorldContext, a: GetUsers) -> Any:
    """Get a list of all users in the workspace with their basic profile information."""
    return slack.users_list(ctx, cursor=a.cursor, limit=a.limit)


class UserProfile(BaseModel):
    user_id: str = Field(description="The user's id, e.g. U0123.")


@tool("slack", "slack_get_user_profile", UserProfile, read_only=True)
def user_profile(ctx: WorldContext, a: UserProfile) -> Any:
    """Get detailed profile information for a specific user."""
    return slack.users_info(ctx, user=a.user_id)["user"]


class SearchMessages(BaseModel):
    query: str = Field(
        description='Slack search syntax: words, "phrases", in:#channel, from:@user, '
        "after:/before:/on:YYYY-MM-DD, -excluded."
    )
    count: int = Field(20, ge=1, le=100, description="Results per page.")
    page: int = Field(1, ge=1, description="1-based page number.")


@tool("slack", "slack_search_messages", SearchMessages, read_only=True)
def search_messages(ctx: WorldContext, a: SearchMessages) -> Any:
    """Search messages the user can see, with Slack's search modifiers."""
    return slack_search.search_messages(ctx, query=a.query, count=a.count, page=a.page)


class JoinChannel(BaseModel):
    channel_id: str = Field(description="The public channel to join.")


@tool("slack", "slack_join_channel", JoinChannel)
def join_channel(ctx: WorldContext, a: JoinChannel) -> Any:
    """Join a public channel (needed before posting to it)."""
    return slack.conversations_join(ctx, channel=a.channel_id)


class OpenDM(BaseModel):
    user_ids: list[str] = Field(description="One user id for a DM, several for a group DM.")


@tool("slack", "slack_open_dm", OpenDM)
def open_dm(ctx: WorldContext, a: OpenDM) -> Any:
    """Open (or find) a direct message conversation; returns its channel id."""
    return slack.conversations_open(ctx, users=a.user_ids)
