from __future__ import annotations

from pathlib import Path

import pytest

from shared.settings import (
    SERVICE_NAMES,
    SettingsError,
    get_settings,
    load_settings,
    settings_table,
)


def test_defaults_live_under_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("K3STACK_DATA_DIR", str(tmp_path))
    s = load_settings()
    assert s.database_url == f"sqlite:///{tmp_path / 'k3stack.db'}"
    assert s.object_store_url == f"file://{tmp_path / 'objects'}"
    assert s.broker_url == f"sqla+sqlite:///{tmp_path / 'broker.db'}"
    assert s.result_backend == f"db+sqlite:///{tmp_path / 'results.db'}"
    assert [s.service(n).port for n in SERVICE_NAMES] == [8000, 8001, 8002, 8003, 8004]
    assert s.model.base_url == "http://127.0.0.1:8000"


def test_environment_beats_dotenv_and_overrides_beat_environment(tmp_path, monkeypatch):
    env_file = tmp_path / "k3.env"
    env_file.write_text(
        "K3STACK_LOG_LEVEL=ERROR\nK3STACK_TOOLS__PORT=7002\nK3STACK_HTTP_RETRIES=5\n"
    )
    monkeypatch.setenv("K3STACK_ENV_FILE", str(env_file))
    monkeypatch.setenv("K3STACK_TOOLS__PORT", "7102")
    s = load_settings()
    assert s.log_level == "ERROR"  # from the dotenv file
    assert s.http_retries == 5
    assert s.tools.port == 7102  # process environment beats the dotenv file
    s2 = load_settings(tools={"port": 7202})
    assert s2.tools.port == 7202  # explicit values beat the environment


def test_nested_service_sections_from_environment(monkeypatch):
    monkeypatch.setenv("K3STACK_SANDBOX__PORT", "9101")
    monkeypatch.setenv("K3STACK_SANDBOX__URL", "http://sandbox.internal:9101/")
    monkeypatch.setenv("K3STACK_SANDBOX__RUNTIME", "process")
    s = load_settings()
    assert s.sandbox.port == 9101
    assert s.sandbox.runtime == "process"
    assert s.sandbox.base_url == "http://sandbox.internal:9101"


@pytest.mark.parametrize(
    ("var", "value", "named"),
    [
        ("K3STACK_MODEL__PORT", "eighty", "K3STACK_MODEL__PORT"),
        ("K3STACK_MODEL__PORT", "70000", "K3STACK_MODEL__PORT"),
        ("K3STACK_HTTP_TIMEOUT_S", "soon", "K3STACK_HTTP_TIMEOUT_S"),
        ("K3STACK_LOG_LEVEL", "LOUD", "K3STACK_LOG_LEVEL"),
        ("K3STACK_AUTH_ENABLED", "perhaps", "K3STACK_AUTH_ENABLED"),
        ("K3STACK_SANDBOX__RUNTIME", "docker-in-docker", "K3STACK_SANDBOX__RUNTIME"),
    ],
    ids=["port-not-int", "port-out-of-range", "float", "enum", "bool", "runtime-enum"],
)
def test_wrong_type_names_the_variable(monkeypatch, var, value, named):
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError) as err:
        load_settings()
    assert named in str(err.value)
    assert repr(value) in str(err.value)


def test_auth_follows_mode_unless_set(monkeypatch):
    assert load_settings().auth_enabled is False
    monkeypatch.setenv("K3STACK_MODE", "deployed")
    assert load_settings().auth_enabled is True
    monkeypatch.setenv("K3STACK_AUTH_ENABLED", "false")
    assert load_settings().auth_enabled is False


def test_get_settings_is_cached_until_cleared(monkeypatch):
    first = get_settings()
    monkeypatch.setenv("K3STACK_LOG_LEVEL", "DEBUG")
    assert get_settings() is first
    get_settings.cache_clear()
    assert get_settings().log_level == "DEBUG"


def test_every_setting_is_documented():
    rows = settings_table()
    names = [r[0] for r in rows]
    assert len(names) == len(set(names))
    assert "K3STACK_DATA_DIR" in names and "K3STACK_VERIFIER__API_KEY" in names
    for var, _default, desc in rows:
        assert var.startswith("K3STACK_")
        assert desc, f"{var} has no description"


def test_unknown_service_section_is_an_error():
    with pytest.raises(SettingsError, match="unknown service"):
        load_settings().service("billing")


def test_data_dir_expands_user(monkeypatch):
    monkeypatch.setenv("K3STACK_DATA_DIR", "~/k3-test-dir")
    assert load_settings().data_dir == Path.home() / "k3-test-dir"


def test_configuration_page_table_is_current():
    from shared.settings import CONFIGURATION_PAGE, TABLE_MARKERS, markdown_table

    assert CONFIGURATION_PAGE == Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    page = CONFIGURATION_PAGE.read_text()
    begin, end = TABLE_MARKERS
    embedded = page.split(begin, 1)[1].split(end, 1)[0].strip()
    assert embedded == markdown_table(), (
        "docs/configuration.md's settings table is stale: run `make docs`"
    )


def test_writing_the_table_replaces_only_what_is_between_the_markers(tmp_path):
    from shared.settings import TABLE_MARKERS, markdown_table, write_table

    begin, end = TABLE_MARKERS
    page = tmp_path / "configuration.md"
    page.write_text(f"# Configuration\n\n{begin}\nold table\n{end}\n\nafter\n")
    write_table(page)
    assert page.read_text() == f"# Configuration\n\n{begin}\n{markdown_table()}\n{end}\n\nafter\n"
    no_markers = tmp_path / "README.md"
    no_markers.write_text("# k3stack\n")
    with pytest.raises(SystemExit, match="markers"):
        write_table(no_markers)
    assert no_markers.read_text() == "# k3stack\n"
