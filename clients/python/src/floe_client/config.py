"""Where Floe is and who the client is: from arguments, the environment, or a credentials file.

Each setting is taken from the first of these that has it:

1. the arguments given to `Client(...)`;
2. the environment, under the names the `floe` CLI reads: `FLOE_SERVER`, `FLOE_CLIENT_ID`,
   `FLOE_CLIENT_SECRET`, plus `FLOE_TOKEN` (a bearer token), `FLOE_FLIGHT` (the Flight SQL
   address) and `FLOE_WAREHOUSE`;
3. a credentials file: the JSON file `floe serve` writes (`root-credentials.json`:
   `client_id`, `client_secret`), which may also say `server`, `flight` and `warehouse` (the
   CLI ignores those keys, so one file serves both). The file is the one named by
   `credentials_file=`, else the profile `profile=` / `FLOE_PROFILE` names
   (`$XDG_CONFIG_HOME/floe/profiles/<name>.json`, default `~/.config/floe/…`), else
   `FLOE_CREDENTIALS_FILE`, else `./floe-data/root-credentials.json` when it exists (the
   CLI's default).

A client id and secret travel together: both come from the same place. Secrets are held in
`Secret`, whose repr and str never show them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit

from .errors import ConfigurationError

DEFAULT_SERVER = "http://127.0.0.1:8181"
DEFAULT_FLIGHT_PORT = 50051
CLI_CREDENTIALS_FILE = Path("floe-data") / "root-credentials.json"


class Secret:
    """A client secret or token: `reveal()` gives it; repr and str never do."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('<redacted>')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self):
        raise TypeError("a Secret is not pickled")


@dataclass(frozen=True)
class Settings:
    """The resolved configuration of a client. `source` says where the credentials came from."""

    server: str
    flight: str
    warehouse: str | None = None
    client_id: str | None = None
    client_secret: Secret | None = field(default=None, repr=False)
    token: Secret | None = field(default=None, repr=False)
    source: str = "arguments"
    verify: bool | str = True

    @property
    def catalog_uri(self) -> str:
        return f"{self.server}/catalog"

    @property
    def token_uri(self) -> str:
        return f"{self.server}/catalog/v1/oauth/tokens"


def config_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "floe"


def profile_path(name: str, env: Mapping[str, str] = os.environ) -> Path:
    """The credentials file of profile `name`."""
    if not name or "/" in name or name.startswith("."):
        raise ConfigurationError(f"profile name {name!r} must be a plain file name")
    return config_dir(env) / "profiles" / f"{name}.json"


def _credentials_file(
    credentials_file: str | os.PathLike | None, profile: str | None, env: Mapping[str, str]
) -> Path | None:
    if credentials_file is not None:
        return Path(credentials_file)
    profile = profile or env.get("FLOE_PROFILE")
    if profile:
        return profile_path(profile, env)
    if env.get("FLOE_CREDENTIALS_FILE"):
        return Path(env["FLOE_CREDENTIALS_FILE"])
    if CLI_CREDENTIALS_FILE.is_file():
        return CLI_CREDENTIALS_FILE
    return None


def _read_file(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigurationError(f"cannot read credentials file {path}: {e.strerror}") from None
    try:
        value = json.loads(text)
    except ValueError:
        raise ConfigurationError(f"credentials file {path} is not JSON") from None
    if not isinstance(value, dict):
        raise ConfigurationError(f"credentials file {path} is not a JSON object")
    return value


def _pair(client_id: str | None, client_secret: str | None, where: str):
    if client_id and client_secret:
        return client_id, client_secret
    if client_id or client_secret:
        missing = "client secret" if client_id else "client id"
        raise ConfigurationError(f"{where} gives a client id or secret without its {missing}")
    return None


def default_flight(server: str) -> str:
    """Flight SQL at the server's host on the default port (TLS when the server is https)."""
    parts = urlsplit(server)
    scheme = "grpc+tls" if parts.scheme == "https" else "grpc"
    host = parts.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{DEFAULT_FLIGHT_PORT}"


def resolve(
    *,
    server: str | None = None,
    client_id: str | None = None,
    client_secret: str | None = None,
    token: str | None = None,
    flight: str | None = None,
    warehouse: str | None = None,
    profile: str | None = None,
    credentials_file: str | os.PathLike | None = None,
    verify: bool | str = True,
    env: Mapping[str, str] | None = None,
) -> Settings:
    env = os.environ if env is None else env
    path = _credentials_file(credentials_file, profile, env)
    # A profile or file asked for must exist; the CLI's default file is used only if present.
    stored = _read_file(path) if path is not None else {}

    def pick(argument: str | None, variable: str, key: str) -> str | None:
        for value in (argument, env.get(variable), stored.get(key)):
            if value:
                return str(value)
        return None

    server_url = (pick(server, "FLOE_SERVER", "server") or DEFAULT_SERVER).rstrip("/")
    levels = [
        ("arguments", _pair(client_id, client_secret, "the arguments"), token),
        (
            "environment",
            _pair(env.get("FLOE_CLIENT_ID"), env.get("FLOE_CLIENT_SECRET"), "the environment"),
            env.get("FLOE_TOKEN"),
        ),
        (
            str(path) if path is not None else "",
            _pair(stored.get("client_id"), stored.get("client_secret"), f"{path}"),
            stored.get("token"),
        ),
    ]
    for source, pair, bearer in levels:
        if pair:
            return Settings(
                server=server_url,
                flight=pick(flight, "FLOE_FLIGHT", "flight") or default_flight(server_url),
                warehouse=pick(warehouse, "FLOE_WAREHOUSE", "warehouse"),
                client_id=pair[0],
                client_secret=Secret(pair[1]),
                source=source,
                verify=verify,
            )
        if bearer:
            return Settings(
                server=server_url,
                flight=pick(flight, "FLOE_FLIGHT", "flight") or default_flight(server_url),
                warehouse=pick(warehouse, "FLOE_WAREHOUSE", "warehouse"),
                token=Secret(str(bearer)),
                source=source,
                verify=verify,
            )
    raise ConfigurationError(
        "no credentials: pass client_id and client_secret (or token), set FLOE_CLIENT_ID and "
        "FLOE_CLIENT_SECRET (or FLOE_TOKEN), or name a credentials file or profile"
    )
