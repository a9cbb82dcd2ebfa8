"""Mock Notion (2022-06-28): pages, typed properties, database queries, blocks, comments, errors."""

from __future__ import annotations

import pytest

from services.tools.apps.notion import actions as notion
from services.tools.apps.notion.routes import router as notion_router
from services.tools.apps.notion.state import export_state
from tests.tools.apps_conftest import make_world, tools_app, world_ctx

V = {"Notion-Version": "2022-06-28"}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    with tools_app(tmp_path_factory.mktemp("notion"), [notion_router]) as app:
        yield app


def api(w, method, path, body=None, **params):
    r = w.client.request(
        method, f"/worlds/{w.id}/notion/v1/{path}", json=body, params=params or None, headers=V
    )
    return r.status_code, r.json()


def ok(w, method, path, body=None, **params):
    status, data = api(w, method, path, body, **params)
    assert status == 200, data
    return data


def title(text):
    return {"title": [{"type": "text", "text": {"content": text}}]}


@pytest.fixture
def world(app):
    w = make_world(app)
    with world_ctx(app, w.id) as ctx:
        notion.setup_workspace(ctx, workspace_name="Acme")
        w.dana = notion.create_user(ctx, name="Dana", email="dana@acme.test")["id"]
    w.home = ok(
        w,
        "POST",
        "pages",
        {"parent": {"workspace": True}, "properties": {"title": title("Home")["title"]}},
    )["id"]
    db = ok(
        w,
        "POST",
        "databases",
        {
            "parent": {"page_id": w.home},
            "title": [{"type": "text", "text": {"content": "Projects"}}],
            "properties": {
                "Name": {"title": {}},
                "Status": {"status": {}},
                "Priority": {
                    "select": {"options": [{"name": "High", "color": "red"}, {"name": "Low"}]}
                },
                "Tags": {"multi_select": {}},
                "Budget": {"number": {"format": "dollar"}},
                "Due": {"date": {}},
                "Owner": {"people": {}},
                "Done": {"checkbox": {}},
                "Link": {"url": {}},
                "Contact": {"email": {}},
                "Notes": {"rich_text": {}},
            },
        },
    )
    w.db = db["id"]
    return w


def add_row(w, name, **props):
    body = {"parent": {"database_id": w.db}, "properties": {"Name": title(name), **props}}
    return ok(w, "POST", "pages", body)


def names(result):
    return [p["properties"]["Name"]["title"][0]["plain_text"] for p in result["results"]]


def test_version_header_pinned(world):
    r = world.client.post(f"/worlds/{world.id}/notion/v1/search", json={})
    assert r.status_code == 400 and r.json()["code"] == "missing_version"
    r = world.client.post(
        f"/worlds/{world.id}/notion/v1/search", json={}, headers={"Notion-Version": "2021-08-16"}
    )
    assert r.status_code == 400 and r.json()["code"] == "validation_error"
    assert "2022-06-28" in r.json()["message"]


def test_typed_properties_roundtrip(world):
    page = add_row(
        world,
        "Contract review",
        Status={"status": {"name": "In progress"}},
        Priority={"select": {"name": "High"}},
        Tags={"multi_select": [{"name": "legal"}, {"name": "q3"}]},
        Budget={"number": 1200.5},
        Due={"date": {"start": "2026-03-05"}},
        Owner={"people": [{"id": world.dana}]},
        Done={"checkbox": False},
        Link={"url": "https://acme.test/c"},
        Contact={"email": "a@b.test"},
        Notes={"rich_text": [{"text": {"content": "first pass"}, "annotations": {"bold": True}}]},
    )
    got = ok(world, "GET", f"pages/{page['id'].replace('-', '')}")
    p = got["properties"]
    assert p["Status"]["status"]["name"] == "In progress"
    assert p["Priority"]["select"]["color"] == "red"
    assert [t["name"] for t in p["Tags"]["multi_select"]] == ["legal", "q3"]
    assert p["Budget"]["number"] == 1200.5 and p["Done"]["checkbox"] is False
    assert p["Owner"]["people"][0]["id"] == world.dana
    assert p["Notes"]["rich_text"][0]["annotations"]["bold"] is True
    assert got["parent"] == {"type": "database_id", "database_id": world.db}
    # new select options are added to the schema, as Notion does
    schema = ok(world, "GET", f"databases/{world.db}")["properties"]
    assert {o["name"] for o in schema["Tags"]["multi_select"]["options"]} == {"legal", "q3"}
    # partial update keeps other properties
    upd = ok(
        world,
        "PATCH",
        f"pages/{page['id']}",
        {"properties": {"Status": {"status": {"name": "Done"}}}},
    )
    assert upd["properties"]["Status"]["status"]["name"] == "Done"
    assert upd["properties"]["Budget"]["number"] == 1200.5


@pytest.mark.parametrize(
    "props, fragment",
    [
        ({"Nope": {"number": 1}}, "is not a property that exists"),
        ({"Budget": {"number": "ten"}}, "should be a number"),
        ({"Status": {"status": {"name": "Someday"}}}, "is not an option"),
        ({"Due": {"date": {"start": "next tuesday"}}}, "ISO 8601"),
        ({"Owner": {"people": [{"id": "00000000-0000-0000-0000-000000000000"}]}}, "does not exist"),
        ({"Done": {"checkbox": "yes"}}, "boolean"),
    ],
    ids=[
        "unknown-prop",
        "bad-number",
        "unknown-status",
        "bad-date",
        "unknown-person",
        "bad-checkbox",
    ],
)
def test_property_validation_errors(world, props, fragment):
    status, err = api(
        world, "POST", "pages", {"parent": {"database_id": world.db}, "properties": props}
    )
    assert status == 400 and err["object"] == "error" and err["code"] == "validation_error"
    assert fragment in err["message"]


def test_query_filters_sorts_paging(world):
    add_row(
        world,
        "Alpha",
        Budget={"number": 10},
        Priority={"select": {"name": "High"}},
        Done={"checkbox": True},
        Due={"date": {"start": "2026-03-01"}},
    )
    add_row(
        world,
        "Beta",
        Budget={"number": 30},
        Priority={"select": {"name": "Low"}},
        Tags={"multi_select": [{"name": "x"}]},
        Due={"date": {"start": "2026-03-10"}},
    )
    add_row(
        world,
        "Gamma",
        Budget={"number": 20},
        Priority={"select": {"name": "High"}},
        Owner={"people": [{"id": world.dana}]},
    )
    add_row(world, "Delta")

    def q(**body):
        return ok(world, "POST", f"databases/{world.db}/query", body)

    assert names(q()) == ["Alpha", "Beta", "Gamma", "Delta"]
    assert names(q(filter={"property": "Priority", "select": {"equals": "High"}})) == [
        "Alpha",
        "Gamma",
    ]
    assert names(q(filter={"property": "Budget", "number": {"greater_than": 15}})) == [
        "Beta",
        "Gamma",
    ]
    assert names(q(filter={"property": "Name", "title": {"contains": "ta"}})) == ["Beta", "Delta"]
    assert names(q(filter={"property": "Done", "checkbox": {"equals": True}})) == ["Alpha"]
    assert names(q(filter={"property": "Tags", "multi_select": {"contains": "x"}})) == ["Beta"]
    assert names(q(filter={"property": "Owner", "people": {"contains": world.dana}})) == ["Gamma"]
    assert names(q(filter={"property": "Due", "date": {"on_or_after": "2026-03-05"}})) == ["Beta"]
    assert names(q(filter={"property": "Budget", "number": {"is_empty": True}})) == ["Delta"]
    compound = {
        "or": [
            {
                "and": [
                    {"property": "Priority", "select": {"equals": "High"}},
                    {"property": "Budget", "number": {"less_than": 15}},
                ]
            },
            {"property": "Name", "title": {"equals": "delta"}},
        ]
    }
    assert names(q(filter=compound)) == ["Alpha", "Delta"]
    assert names(q(sorts=[{"property": "Budget", "direction": "descending"}])) == [
        "Beta",
        "Gamma",
        "Alpha",
        "Delta",
    ]
    assert names(
        q(
            sorts=[
                {"property": "Priority", "direction": "ascending"},
                {"property": "Budget", "direction": "descending"},
            ]
        )
    ) == ["Gamma", "Alpha", "Beta", "Delta"]
    first = q(page_size=3)
    assert len(first["results"]) == 3 and first["has_more"] and first["next_cursor"]
    rest = q(page_size=3, start_cursor=first["next_cursor"])
    assert names(rest) == ["Delta"] and rest["has_more"] is False and rest["next_cursor"] is None
    for bad in [
        {"page_size": 101},
        {"start_cursor": "nope"},
        {"filter": {"property": "Nope", "number": {"equals": 1}}},
        {"filter": {"property": "Budget", "number": {"near": 1}}},
        {"sorts": [{"property": "Budget", "direction": "up"}]},
    ]:
        status, err = api(world, "POST", f"databases/{world.db}/query", bad)
        assert status == 400 and err["code"] == "validation_error", bad


def test_archive_excludes_from_query_and_search(world):
    a = add_row(world, "Keep")
    b = add_row(world, "Drop")
    ok(world, "PATCH", f"pages/{b['id']}", {"archived": True})
    assert names(ok(world, "POST", f"databases/{world.db}/query", {})) == ["Keep"]
    assert ok(world, "GET", f"pages/{b['id']}")["archived"] is True
    status, err = api(world, "PATCH", f"pages/{b['id']}", {"properties": {"Name": title("x")}})
    assert status == 400 and "archived" in err["message"]
    hits = ok(world, "POST", "search", {"query": "drop"})
    assert hits["results"] == []
    hits = ok(
        world,
        "POST",
        "search",
        {"query": "keep", "filter": {"property": "object", "value": "page"}},
    )
    assert [h["id"] for h in hits["results"]] == [a["id"]]
    dbs = ok(world, "POST", "search", {"filter": {"property": "object", "value": "database"}})
    assert [d["id"] for d in dbs["results"]] == [world.db]


def test_blocks_append_list_update_delete(world):
    page = ok(
        world,
        "POST",
        "pages",
        {
            "parent": {"page_id": world.home},
            "properties": title("Minutes"),
            "children": [
                {
                    "object": "block",
                    "type": "heading_1",
                    "heading_1": {"rich_text": [{"type": "text", "text": {"content": "Agenda"}}]},
                },
            ],
        },
    )
    kinds = [
        "paragraph",
        "bulleted_list_item",
        "numbered_list_item",
        "to_do",
        "toggle",
        "quote",
        "callout",
        "heading_2",
        "heading_3",
    ]
    children = [
        {"type": k, k: {"rich_text": [{"type": "text", "text": {"content": k}}]}} for k in kinds
    ]
    children += [
        {"type": "divider", "divider": {}},
        {
            "type": "code",
            "code": {"rich_text": [{"text": {"content": "x=1"}}], "language": "python"},
        },
    ]
    children[4]["toggle"]["children"] = [
        {"type": "paragraph", "paragraph": {"rich_text": [{"text": {"content": "inside"}}]}}
    ]
    appended = ok(world, "PATCH", f"blocks/{page['id']}/children", {"children": children})
    assert [b["type"] for b in appended["results"]] == kinds + ["divider", "code"]
    listed = ok(world, "GET", f"blocks/{page['id']}/children", page_size=5)
    assert listed["has_more"] and listed["results"][0]["type"] == "heading_1"
    rest = ok(world, "GET", f"blocks/{page['id']}/children", start_cursor=listed["next_cursor"])
    assert len(listed["results"]) + len(rest["results"]) == 12
    toggle = appended["results"][4]
    assert toggle["has_children"]
    assert (
        ok(world, "GET", f"blocks/{toggle['id']}/children")["results"][0]["paragraph"]["rich_text"][
            0
        ]["plain_text"]
        == "inside"
    )
    todo = appended["results"][3]
    upd = ok(world, "PATCH", f"blocks/{todo['id']}", {"to_do": {"checked": True}})
    assert upd["to_do"]["checked"] is True and upd["to_do"]["rich_text"][0]["plain_text"] == "to_do"
    status, err = api(world, "PATCH", f"blocks/{todo['id']}", {"paragraph": {"rich_text": []}})
    assert status == 400 and err["code"] == "validation_error"
    # insert after the heading
    ins = ok(
        world,
        "PATCH",
        f"blocks/{page['id']}/children",
        {
            "children": [
                {"type": "paragraph", "paragraph": {"rich_text": [{"text": {"content": "second"}}]}}
            ],
            "after": listed["results"][0]["id"],
        },
    )
    order = ok(world, "GET", f"blocks/{page['id']}/children")["results"]
    assert order[1]["id"] == ins["results"][0]["id"]
    deleted = ok(world, "DELETE", f"blocks/{todo['id']}")
    assert deleted["archived"] is True
    assert todo["id"] not in [
        b["id"] for b in ok(world, "GET", f"blocks/{page['id']}/children")["results"]
    ]
    # the sub-page is a child_page block of its parent
    home_children = ok(world, "GET", f"blocks/{world.home}/children")["results"]
    assert {b["type"] for b in home_children} == {"child_database", "child_page"}
    status, err = api(
        world,
        "PATCH",
        f"blocks/{page['id']}/children",
        {"children": [{"type": "video", "video": {}}]},
    )
    assert status == 400 and "paragraph" in err["message"]


def test_comments_and_users(world):
    page = add_row(world, "Discuss")
    c1 = ok(
        world,
        "POST",
        "comments",
        {"parent": {"page_id": page["id"]}, "rich_text": [{"text": {"content": "Looks good"}}]},
    )
    c2 = ok(
        world,
        "POST",
        "comments",
        {"discussion_id": c1["discussion_id"], "rich_text": [{"text": {"content": "Agreed"}}]},
    )
    assert c2["discussion_id"] == c1["discussion_id"]
    listed = ok(world, "GET", "comments", block_id=page["id"])
    assert [c["rich_text"][0]["plain_text"] for c in listed["results"]] == ["Looks good", "Agreed"]
    users = ok(world, "GET", "users")["results"]
    assert {u["type"] for u in users} == {"bot", "person"}
    me = ok(world, "GET", "users/me")
    assert me["type"] == "bot" and me["bot"]["workspace_name"] == "Acme"
    assert ok(world, "GET", f"users/{world.dana}")["person"]["email"] == "dana@acme.test"


def test_errors_are_notion_shaped(app, world):
    status, err = api(world, "GET", "pages/00000000000000000000000000000000")
    assert status == 404 and err["code"] == "object_not_found"
    r = world.client.post(
        f"/worlds/{world.id}/notion/v1/pages",
        content=b"{bad",
        headers={**V, "Content-Type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["code"] == "invalid_json"
    status, err = api(world, "POST", "pages", {"properties": {}})
    assert status == 400 and err["code"] == "validation_error"
    status, err = api(world, "GET", "nowhere")
    assert status == 400 and err["code"] == "invalid_request_url"
    other = make_world(app)
    r = other.client.get(f"/worlds/{world.id}/notion/v1/users/me", headers=V)
    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
    status, err = api(
        world,
        "POST",
        "databases",
        {"parent": {"page_id": world.home}, "properties": {"A": {"number": {}}}},
    )
    assert status == 400 and "title" in err["message"]


def test_state_export_and_failed_write(app, world):
    with world_ctx(app, world.id) as ctx:
        before = export_state(ctx)
    status, _ = api(
        world,
        "PATCH",
        f"blocks/{world.home}/children",
        {"children": [{"type": "paragraph", "paragraph": {}}, {"type": "bogus"}]},
    )
    assert status == 400
    with world_ctx(app, world.id) as ctx:
        assert export_state(ctx) == before
    add_row(world, "Row")
    with world_ctx(app, world.id) as ctx:
        state = export_state(ctx)
    assert len(state["pages"]) == 2 and len(state["databases"]) == 1


def test_fuzzed_bodies_never_500(world):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.tools.apps_conftest import json_bodies

    keys = [
        "parent",
        "properties",
        "children",
        "query",
        "filter",
        "sort",
        "sorts",
        "start_cursor",
        "page_size",
        "title",
        "archived",
        "rich_text",
        "discussion_id",
        "after",
        "paragraph",
        "to_do",
    ]
    routes = [
        ("POST", "search"),
        ("POST", "pages"),
        ("PATCH", f"pages/{world.home}"),
        ("POST", "databases"),
        ("PATCH", f"databases/{world.db}"),
        ("POST", f"databases/{world.db}/query"),
        ("PATCH", f"blocks/{world.home}/children"),
        ("POST", "comments"),
    ]

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(route=st.sampled_from(routes), body=json_bodies(keys))
    def check(route, body):
        status, err = api(world, route[0], route[1], body)
        assert status < 500, (route, body, err)

    check()


def test_data_sources_at_2025_09_03(world):
    """notion-client 3.x's default version: one data source per database, same id."""
    h = {"Notion-Version": "2025-09-03"}

    def call(method, path, body=None):
        r = world.client.request(
            method, f"/worlds/{world.id}/notion/v1/{path}", json=body, headers=h
        )
        return r.status_code, r.json()

    status, db = call("GET", f"databases/{world.db}")
    assert status == 200 and "properties" not in db and db["data_sources"][0]["id"] == world.db
    status, ds = call("GET", f"data_sources/{world.db}")
    assert ds["object"] == "data_source" and "Status" in ds["properties"]
    assert ds["parent"] == {"type": "database_id", "database_id": world.db}
    status, page = call(
        "POST",
        "pages",
        {
            "parent": {"type": "data_source_id", "data_source_id": world.db},
            "properties": {"Name": title("Via data source"), "Budget": {"number": 5}},
        },
    )
    assert status == 200 and page["parent"]["type"] == "data_source_id"
    status, rows = call(
        "POST",
        f"data_sources/{world.db}/query",
        {"filter": {"property": "Budget", "number": {"equals": 5}}},
    )
    assert (
        status == 200
        and rows["type"] == "page_or_data_source"
        and [r["id"] for r in rows["results"]] == [page["id"]]
    )
    status, found = call(
        "POST", "search", {"filter": {"property": "object", "value": "data_source"}}
    )
    assert [f["object"] for f in found["results"]] == ["data_source"]
    status, err = call("POST", "search", {"filter": {"property": "object", "value": "database"}})
    assert status == 400
    status, upd = call(
        "PATCH", f"data_sources/{world.db}", {"properties": {"Extra": {"checkbox": {}}}}
    )
    assert "Extra" in upd["properties"]
    status, new = call(
        "POST",
        "databases",
        {
            "parent": {"page_id": world.home},
            "title": title("T")["title"],
            "initial_data_source": {"properties": {"Name": {"title": {}}}},
        },
    )
    assert status == 200 and new["data_sources"][0]["id"] == new["id"]
    # the same world read at 2022-06-28 sees the classic shapes
    assert ok(world, "GET", f"pages/{page['id']}")["parent"] == {
        "type": "database_id",
        "database_id": world.db,
    }
