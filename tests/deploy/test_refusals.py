"""Deployed mode (K3STACK_MODE=deployed) refuses to start on settings that would run unsafely or
silently fall back to embedded stores; the error names the variable. Checked through the app
factory, the Celery app factory and a real ``python -m services.tools`` process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.app import create_app
from shared.queue import make_celery
from shared.settings import SERVICE_NAMES, SettingsError, load_settings

GOOD_KEY = "k3s-0123456789abcdef0123"


def deployed_env() -> dict[str, str]:
    """A complete, acceptable deployed configuration (nothing here is contacted)."""
    env = {
        "K3STACK_MODE": "deployed",
        "K3STACK_DATABASE_URL": "postgresql+psycopg://k3stack:pw-0123456789abcdef@db:5432/k3stack",
        "K3STACK_BROKER_URL": "redis://:pw@redis:6379/0",
        "K3STACK_RESULT_BACKEND": "redis://:pw@redis:6379/1",
        "K3STACK_OBJECT_STORE_URL": "http://minio:9000",
        "K3STACK_OBJECT_STORE_ACCESS_KEY": "k3stack-app",
        "K3STACK_OBJECT_STORE_SECRET_KEY": "s3-0123456789abcdef0123",
    }
    for svc in SERVICE_NAMES:
        env[f"K3STACK_{svc.upper()}__API_KEY"] = f"{GOOD_KEY}-{svc}"
    return env


@pytest.fixture
def deployed(clean_k3stack_env: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for key, value in deployed_env().items():
        clean_k3stack_env.setenv(key, value)
    return clean_k3stack_env


def test_a_complete_configuration_starts(deployed: pytest.MonkeyPatch) -> None:
    app = create_app("tools", settings=load_settings())
    assert app.state.settings.mode == "deployed" and app.state.settings.auth_enabled
    assert make_celery("tools", load_settings()).conf.broker_url == "redis://:pw@redis:6379/0"


@pytest.mark.parametrize(
    "key",
    [
        "secret-" + "9f8e7d6c5b4a39281706f5e4",  # a random key that starts with a word
        "password" + "Qx7_vR2mZk9LpW4t",
        "example-3b9014933a2300bab9eeab3f",
        "f3a91c07d2be6845",  # 16 random hex characters: the shortest key a generator gives
    ],
)
def test_random_keys_are_accepted_whatever_word_they_start_with(
    deployed: pytest.MonkeyPatch, key: str
) -> None:
    deployed.setenv("K3STACK_TOOLS__API_KEY", key)
    assert create_app("tools", settings=load_settings()).state.settings.tools.api_key == key


BAD = [
    ("K3STACK_TOOLS__API_KEY", None, "K3STACK_TOOLS__API_KEY is empty"),
    ("K3STACK_TOOLS__API_KEY", "", "K3STACK_TOOLS__API_KEY is empty"),
    ("K3STACK_TOOLS__API_KEY", "change-me-tools", "K3STACK_TOOLS__API_KEY is a default"),
    ("K3STACK_TOOLS__API_KEY", "short-key", "K3STACK_TOOLS__API_KEY is shorter than 16"),
    ("K3STACK_TOOLS__API_KEY", "a" * 16, "K3STACK_TOOLS__API_KEY has too little entropy"),
    ("K3STACK_TOOLS__API_KEY", "abcd" * 8, "K3STACK_TOOLS__API_KEY has too little entropy"),
    ("K3STACK_TOOLS__API_KEY", "password-password", "K3STACK_TOOLS__API_KEY is a default"),
    # Another service's key this pod carries must be as good as its own.
    ("K3STACK_MODEL__API_KEY", "change-me-model", "K3STACK_MODEL__API_KEY is a default"),
    ("K3STACK_DATABASE_URL", None, "K3STACK_DATABASE_URL is not set"),
    ("K3STACK_BROKER_URL", None, "K3STACK_BROKER_URL is not set"),
    ("K3STACK_RESULT_BACKEND", None, "K3STACK_RESULT_BACKEND is not set"),
    ("K3STACK_OBJECT_STORE_URL", None, "K3STACK_OBJECT_STORE_URL is not set"),
    ("K3STACK_OBJECT_STORE_ACCESS_KEY", None, "K3STACK_OBJECT_STORE_ACCESS_KEY is empty"),
    ("K3STACK_OBJECT_STORE_SECRET_KEY", "change-me-minio", "K3STACK_OBJECT_STORE_SECRET_KEY is a"),
    ("K3STACK_OBJECT_STORE_SECRET_KEY", "minioadmin", "K3STACK_OBJECT_STORE_SECRET_KEY is a"),
    ("K3STACK_AUTH_ENABLED", "false", "K3STACK_AUTH_ENABLED=false is refused"),
]


@pytest.mark.parametrize(("var", "value", "message"), BAD, ids=[f"{v}={x}" for v, x, _ in BAD])
def test_bad_setting_refuses_start(
    deployed: pytest.MonkeyPatch, var: str, value: str | None, message: str
) -> None:
    if value is None:
        deployed.delenv(var)
    else:
        deployed.setenv(var, value)
    settings = load_settings()
    with pytest.raises(SettingsError, match=message):
        create_app("tools", settings=settings)
    with pytest.raises(SettingsError, match=var):
        _ = make_celery("tools", settings).conf.broker_url  # the worker configures itself


def test_local_mode_keeps_its_embedded_defaults(clean_k3stack_env: pytest.MonkeyPatch) -> None:
    app = create_app("tools", settings=load_settings())
    assert app.state.settings.database_url.startswith("sqlite:///")


def test_auth_off_needs_the_explicit_override_and_is_logged(
    deployed: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    deployed.setenv("K3STACK_AUTH_ENABLED", "false")
    deployed.setenv("K3STACK_ALLOW_INSECURE_NO_AUTH", "true")
    create_app("tools", settings=load_settings())
    logged = capfd.readouterr().err  # the service's own log handler writes to stderr
    assert "ERROR k3stack.app: INSECURE: tools runs in deployed mode with authentication OFF" in (
        logged
    )


def test_process_runtime_is_off_in_deployed_mode_unless_enabled(
    deployed: pytest.MonkeyPatch,
) -> None:
    deployed.setenv("K3STACK_SANDBOX__RUNTIME", "process")
    with pytest.raises(SettingsError, match="K3STACK_SANDBOX__RUNTIME=process is refused"):
        create_app("sandbox", settings=load_settings())
    deployed.setenv("K3STACK_SANDBOX__ALLOW_PROCESS_RUNTIME", "true")
    create_app("sandbox", settings=load_settings())


def test_a_real_service_process_exits_naming_the_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("K3STACK_")}
    env |= deployed_env() | {"K3STACK_DATA_DIR": str(tmp_path), "K3STACK_ENV_FILE": "/dev/null"}
    env["K3STACK_TOOLS__API_KEY"] = "change-me-tools"
    del env["K3STACK_DATABASE_URL"]
    result = subprocess.run(
        [sys.executable, "-m", "services.tools"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "refuses to start in deployed mode" in result.stderr
    assert "K3STACK_TOOLS__API_KEY is a default" in result.stderr
    assert "K3STACK_DATABASE_URL is not set" in result.stderr


def test_secret_files_fill_unset_variables_and_the_environment_wins(
    deployed: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """K3STACK_SECRETS_DIR (Compose secrets): a file per variable, below the environment."""
    (tmp_path / "K3STACK_TOOLS__API_KEY").write_text("from-a-file-0123456789\n")
    (tmp_path / "K3STACK_DATABASE_URL").write_text("postgresql+psycopg://u:p@file-db/k3stack")
    deployed.delenv("K3STACK_TOOLS__API_KEY")
    deployed.setenv("K3STACK_SECRETS_DIR", str(tmp_path))
    s = load_settings()
    assert s.tools.api_key == "from-a-file-0123456789"  # nested section, stripped
    assert s.database_url == deployed_env()["K3STACK_DATABASE_URL"]  # the environment wins
    (tmp_path / "K3STACK_TOOLS__API_KEY").write_text("change-me")
    with pytest.raises(SettingsError, match="K3STACK_TOOLS__API_KEY is a default"):
        create_app("tools", settings=load_settings())
