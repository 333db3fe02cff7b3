"""HTTP to Floe: tokens, one call per management operation, errors as exceptions.

Tokens come from OAuth2 client credentials at `/catalog/v1/oauth/tokens`. A token is reused
until a fifth of its lifetime (at most a minute) is left, then a new one is fetched before
the next request; a request answered 401 fetches a new token and is sent once more. A static
bearer token (`token=` / `FLOE_TOKEN`) is used as given and never refreshed.

Logging (logger `floe_client`, DEBUG): method, path, status, request id and time of each
request, and token fetches with their lifetime. Never headers, bodies, secrets or tokens.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping
from urllib.parse import quote

import requests

from .config import Settings
from .errors import FloeError, Unauthenticated, from_body

log = logging.getLogger("floe_client")

# Every management operation the client calls: operationId -> (method, path), exactly as
# /api/v1/openapi.json names them. A test holds this table to a live server's document.
OPERATIONS: dict[str, tuple[str, str]] = {
    "listWarehouses": ("GET", "/api/v1/warehouses"),
    "createWarehouse": ("POST", "/api/v1/warehouses"),
    "getWarehouse": ("GET", "/api/v1/warehouses/{name}"),
    "deleteWarehouse": ("DELETE", "/api/v1/warehouses/{name}"),
    "validateWarehouse": ("POST", "/api/v1/warehouses/{name}/validate"),
    "validateStorage": ("POST", "/api/v1/storage/validate"),
    "getSoftDelete": ("GET", "/api/v1/warehouses/{name}/soft-delete"),
    "setSoftDelete": ("PUT", "/api/v1/warehouses/{name}/soft-delete"),
    "listDropped": ("GET", "/api/v1/warehouses/{name}/dropped"),
    "undrop": ("POST", "/api/v1/warehouses/{name}/dropped/{id}/undrop"),
    "purgeDropped": ("POST", "/api/v1/warehouses/{name}/dropped/{id}/purge"),
    "getDeletionProtection": ("GET", "/api/v1/protection"),
    "setDeletionProtection": ("PUT", "/api/v1/protection"),
    "listPrincipals": ("GET", "/api/v1/principals"),
    "createPrincipal": ("POST", "/api/v1/principals"),
    "getPrincipal": ("GET", "/api/v1/principals/{name}"),
    "whoami": ("GET", "/api/v1/whoami"),
    "rotatePrincipalCredentials": ("POST", "/api/v1/principals/{name}/rotate-credentials"),
    "disablePrincipal": ("POST", "/api/v1/principals/{name}/disable"),
    "enablePrincipal": ("POST", "/api/v1/principals/{name}/enable"),
    "rotateSigningKey": ("POST", "/api/v1/signing-keys/rotate"),
    "listRoles": ("GET", "/api/v1/roles"),
    "createRole": ("POST", "/api/v1/roles"),
    "deleteRole": ("DELETE", "/api/v1/roles/{name}"),
    "addRoleMember": ("POST", "/api/v1/roles/{name}/members"),
    "removeRoleMember": ("DELETE", "/api/v1/roles/{name}/members/{principal}"),
    "listRoleGrants": ("GET", "/api/v1/roles/{name}/grants"),
    "grant": ("POST", "/api/v1/grants"),
    "revoke": ("POST", "/api/v1/grants/revoke"),
    "listPolicies": ("GET", "/api/v1/policies"),
    "setPolicy": ("PUT", "/api/v1/policies"),
    "removePolicy": ("POST", "/api/v1/policies/remove"),
    "listAudit": ("GET", "/api/v1/audit"),
    "accessReview": ("GET", "/api/v1/access-review"),
    "runSql": ("POST", "/api/v1/sql"),
    "ingestStatus": ("GET", "/api/v1/ingest/status"),
    "replayIngest": ("POST", "/api/v1/ingest/replay"),
    "expireSnapshots": ("POST", "/api/v1/maintenance/expire-snapshots"),
    "removeOrphanFiles": ("POST", "/api/v1/maintenance/remove-orphan-files"),
    "getMaintenancePolicy": ("GET", "/api/v1/maintenance/policies"),
    "setMaintenancePolicy": ("PUT", "/api/v1/maintenance/policies"),
    "listJobs": ("GET", "/api/v1/jobs"),
    "queueJob": ("POST", "/api/v1/jobs"),
    "getJob": ("GET", "/api/v1/jobs/{id}"),
    "checkTable": ("POST", "/api/v1/tables/check"),
    "repairTable": ("POST", "/api/v1/tables/repair"),
    "listPipelines": ("GET", "/api/v1/pipelines"),
    "createPipeline": ("POST", "/api/v1/pipelines"),
    "getPipeline": ("GET", "/api/v1/pipelines/{name}"),
    "deletePipeline": ("DELETE", "/api/v1/pipelines/{name}"),
    "pipelineStatus": ("GET", "/api/v1/pipelines/{name}/status"),
    "redrivePipelineDeadLetters": ("POST", "/api/v1/pipelines/{name}/dead-letters/redrive"),
    "getTenantLimits": ("GET", "/api/v1/tenants/{warehouse}/limits"),
    "setTenantLimits": ("PUT", "/api/v1/tenants/{warehouse}/limits"),
    "deleteTenantLimits": ("DELETE", "/api/v1/tenants/{warehouse}/limits"),
    "convertTable": ("POST", "/api/v1/tables/convert"),
    "listMigrations": ("GET", "/api/v1/migrations"),
    "getMigration": ("GET", "/api/v1/migrations/{name}"),
    "forgetMigration": ("DELETE", "/api/v1/migrations/{name}"),
    "putMigrationTable": ("PUT", "/api/v1/migrations/{name}/tables"),
    "readMigrationMetadata": ("POST", "/api/v1/migrations/read-metadata"),
    "digestMigratedTable": ("POST", "/api/v1/migrations/digest"),
    "listWorkers": ("GET", "/api/v1/workers"),
}

# A token is refreshed when less than this share of its lifetime is left (at most a minute).
REFRESH_SHARE = 0.2
REFRESH_MAX_MARGIN_SECONDS = 60.0


def _retry_after(response: requests.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _error(response: requests.Response) -> FloeError:
    try:
        body = response.json()
    except ValueError:
        body = None
    return from_body(
        response.status_code,
        body,
        response.text,
        request_id=response.headers.get("x-request-id"),
        retry_after=_retry_after(response),
    )


class TokenSource:
    """Bearer tokens for one client: fetched with client credentials, refreshed before they
    expire, dropped when the server refuses them. Thread-safe."""

    def __init__(
        self,
        settings: Settings,
        session: requests.Session,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._session = session
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = settings.token.reveal() if settings.token else None
        self._refresh_at = float("inf")
        self.fetches = 0  # tokens fetched so far

    @property
    def refreshable(self) -> bool:
        return self._settings.client_secret is not None

    def __repr__(self) -> str:
        return f"TokenSource(client_id={self._settings.client_id!r}, fetches={self.fetches})"

    def token(self) -> str:
        with self._lock:
            if self._token is None or (self.refreshable and self._clock() >= self._refresh_at):
                self._fetch()
            assert self._token is not None
            return self._token

    def refused(self, token: str) -> bool:
        """The server refused `token`: forget it. True when a new one can be fetched."""
        with self._lock:
            if not self.refreshable:
                return False
            if self._token == token:
                self._token = None
            return True

    def _fetch(self) -> None:
        settings = self._settings
        if settings.client_secret is None:
            raise Unauthenticated("the bearer token was refused and no client credentials were given")
        started = self._clock()
        try:
            response = self._session.post(
                settings.token_uri,
                data={
                    "grant_type": "client_credentials",
                    "client_id": settings.client_id,
                    "client_secret": settings.client_secret.reveal(),
                    "scope": "catalog",
                },
                timeout=30,
                verify=settings.verify,
            )
        except requests.RequestException as e:
            raise FloeError(f"cannot reach Floe at {settings.server}: {type(e).__name__}") from None
        if response.status_code != 200:
            raise _error(response)
        body = response.json()
        expires_in = float(body.get("expires_in") or 3600)
        margin = min(REFRESH_MAX_MARGIN_SECONDS, expires_in * REFRESH_SHARE)
        self._token = body["access_token"]
        self._refresh_at = started + expires_in - margin
        self.fetches += 1
        log.debug("fetched token for client %s, expires in %.0fs", settings.client_id, expires_in)


class Transport:
    """Sends management operations with a current token and turns error answers into
    `FloeError`s."""

    def __init__(self, settings: Settings, session: requests.Session | None = None) -> None:
        self.settings = settings
        self.session = session or requests.Session()
        self.tokens = TokenSource(settings, self.session)

    def __repr__(self) -> str:
        return f"Transport(server={self.settings.server!r})"

    def call(
        self,
        operation: str,
        *,
        path: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        timeout: float | None = 300,
    ) -> Any:
        """Runs one operation of OPERATIONS; answers its JSON body (None for 204)."""
        method, template = OPERATIONS[operation]
        url_path = template.format(**{k: quote(str(v), safe="") for k, v in (path or {}).items()})
        query = {k: v for k, v in (params or {}).items() if v is not None}
        return self.request(method, url_path, params=query, json=body, timeout=timeout)

    def request(self, method: str, url_path: str, *, timeout: float | None = 300, **kwargs) -> Any:
        """Any authenticated request below the server's URL; JSON answers are decoded."""
        for attempt in (1, 2):
            token = self.tokens.token()
            headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
            started = time.monotonic()
            try:
                response = self.session.request(
                    method,
                    f"{self.settings.server}{url_path}",
                    headers=headers,
                    timeout=timeout,
                    verify=self.settings.verify,
                    **kwargs,
                )
            except requests.RequestException as e:
                raise FloeError(f"cannot reach Floe at {self.settings.server}: {type(e).__name__}") from None
            log.debug(
                "%s %s -> %s (request id %s, %.0f ms)",
                method,
                url_path,
                response.status_code,
                response.headers.get("x-request-id"),
                (time.monotonic() - started) * 1000,
            )
            if response.status_code == 401 and attempt == 1 and self.tokens.refused(token):
                kwargs["headers"] = {k: v for k, v in headers.items() if k != "Authorization"}
                continue
            if response.status_code >= 400:
                raise _error(response)
            if response.status_code == 204 or not response.content:
                return None
            if "json" in response.headers.get("content-type", ""):
                return response.json()
            return response.text
        raise AssertionError("unreachable")
