"""PyIceberg's catalog authenticated by a Floe client's tokens."""

from __future__ import annotations

from pyiceberg.catalog.rest.auth import AuthManager

from .transport import TokenSource


class FloeAuthManager(AuthManager):
    """Bearer tokens from a `TokenSource`: PyIceberg's requests use the client's current
    token, refreshed before it expires."""

    def __init__(self, tokens: TokenSource) -> None:
        self._tokens = tokens

    def auth_header(self) -> str:
        return f"Bearer {self._tokens.token()}"
