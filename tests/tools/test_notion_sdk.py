"""Contract: the official ``notion-client`` (2.5.0, Notion-Version 2022-06-28) works unchanged
against the mock Notion."""

from __future__ import annotations

import pytest
from notion_client import APIErrorCode, APIResponseError, Client
from notion_client.helpers import collect_paginated_api

from services.tools.apps.notion import actions as notion
from tests.tools.apps_conftest import create_world, service_server, world_ctx


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with service_server(tmp_path_factory.mktemp("notion-sdk")) as (app, url):
        yield app, url


@pytest.fixture
def client(server):
    app, url = server
    wid, token = create_world(url)
    with world_ctx(app, wid) as ctx:
        notion.setup_workspace(ctx, workspace_name="Acme")
        dana = notion.create_user(ctx, name="Dana", email="dana@acme.test")["id"]
    c = Client(auth=token, base_url=f"{url}/worlds/{wid}/notion")
    c.dana = dana
    return c


def text(s):
    return [{"type": "text", "text": {"content": s}}]


def test_pages_databases_query(client):
    assert client.users.me()["type"] == "bot"
    home = client.pages.create(
        parent={"type": "workspace", "workspace": True},
        properties={"title": {"title": text("Home")}},
    )
    db = client.databases.create(
        parent={"type": "page_id", "page_id": home["id"]},
        title=text("Tasks"),
        properties={
            "Name": {"title": {}},
            "Status": {"status": {}},
            "Owner": {"people": {}},
            "Due": {"date": {}},
        },
    )
    for i, status in enumerate(["Done", "In progress", "Done"]):
        client.pages.create(
            parent={"database_id": db["id"]},
            properties={
                "Name": {"title": text(f"Task {i}")},
                "Status": {"status": {"name": status}},
                "Owner": {"people": [{"id": client.dana}]},
                "Due": {"date": {"start": f"2026-03-0{i + 2}"}},
            },
        )
    done = client.databases.query(
        database_id=db["id"],
        filter={
            "and": [
                {"property": "Status", "status": {"equals": "Done"}},
                {"property": "Owner", "people": {"contains": client.dana}},
            ]
        },
        sorts=[{"property": "Due", "direction": "descending"}],
    )
    assert [p["properties"]["Name"]["title"][0]["plain_text"] for p in done["results"]] == [
        "Task 2",
        "Task 0",
    ]
    everything = collect_paginated_api(client.databases.query, database_id=db["id"], page_size=1)
    assert len(everything) == 3
    row = done["results"][0]
    upd = client.pages.update(
        page_id=row["id"], properties={"Status": {"status": {"name": "In progress"}}}
    )
    assert upd["properties"]["Status"]["status"]["name"] == "In progress"
    found = client.search(query="task", filter={"property": "object", "value": "page"})
    assert len(found["results"]) == 3
    assert client.databases.retrieve(database_id=db["id"])["title"][0]["plain_text"] == "Tasks"
    status_id = upd["properties"]["Status"]["id"]
    item = client.pages.properties.retrieve(page_id=row["id"], property_id=status_id)
    assert item["object"] == "property_item" and item["status"]["name"] == "In progress"
    title = client.pages.properties.retrieve(page_id=row["id"], property_id="title")
    assert title["object"] == "list" and title["results"][0]["title"]["plain_text"] == "Task 2"


def test_blocks_and_comments(client):
    page = client.pages.create(
        parent={"type": "workspace", "workspace": True},
        properties={"title": {"title": text("Notes")}},
    )
    added = client.blocks.children.append(
        block_id=page["id"],
        children=[
            {"object": "block", "type": "heading_2", "heading_2": {"rich_text": text("Actions")}},
            {
                "object": "block",
                "type": "to_do",
                "to_do": {"rich_text": text("Send contract"), "checked": False},
            },
        ],
    )
    todo = added["results"][1]
    client.blocks.update(block_id=todo["id"], to_do={"checked": True})
    assert client.blocks.retrieve(block_id=todo["id"])["to_do"]["checked"] is True
    kids = collect_paginated_api(client.blocks.children.list, block_id=page["id"])
    assert [b["type"] for b in kids] == ["heading_2", "to_do"]
    client.blocks.delete(block_id=kids[0]["id"])
    assert [b["type"] for b in client.blocks.children.list(block_id=page["id"])["results"]] == [
        "to_do"
    ]
    c = client.comments.create(parent={"page_id": page["id"]}, rich_text=text("Done?"))
    assert client.comments.list(block_id=page["id"])["results"][0]["id"] == c["id"]
    assert {u["type"] for u in client.users.list()["results"]} == {"bot", "person"}


def test_errors_are_sdk_api_errors(client):
    with pytest.raises(APIResponseError) as err:
        client.pages.retrieve(page_id="00000000-0000-0000-0000-000000000000")
    assert err.value.code == APIErrorCode.ObjectNotFound
    with pytest.raises(APIResponseError) as err:
        client.pages.create(parent={"database_id": "nope"}, properties={})
    assert err.value.code == APIErrorCode.ObjectNotFound
    with pytest.raises(APIResponseError) as err:
        client.search(page_size=500)
    assert err.value.code == APIErrorCode.ValidationError
    bad = Client(auth="wrong", base_url=client.options.base_url)
    with pytest.raises(APIResponseError) as err:
        bad.users.me()
    assert err.value.code == APIErrorCode.Unauthorized
