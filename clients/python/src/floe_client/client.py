"""`Client`: one object for Floe's management API, its Iceberg REST catalog and Flight SQL."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from . import errors
from .config import Settings, resolve
from .governance import Audit, DataPolicies, Grants, Principals, Roles
from .maintenance import Jobs, Maintenance, Policies
from .migrations import Migrations
from .models import ListWorkersResponseWorkersItem, RunSqlResponse
from .pipelines import Ingest, Pipelines
from .tenants import Tenants
from .transport import TokenSource, Transport
from .warehouses import Protection, Warehouses

if TYPE_CHECKING:
    import pyarrow
    from pyiceberg.catalog.rest import RestCatalog


class Client:
    """A Floe server and the credentials to use it.

    Every argument is optional; what is not given comes from the environment or a
    credentials file (see `floe_client.config`):

        client = Client()                                   # FLOE_SERVER, FLOE_CLIENT_ID, …
        client = Client(profile="prod")                     # ~/.config/floe/profiles/prod.json
        client = Client("http://floe:8181", client_id=…, client_secret=…)

    Resource groups: `warehouses`, `protection`, `principals`, `roles`, `grants`,
    `data_policies` (row and column policies), `audit` (with the access review), `jobs`,
    `policies` (maintenance policies), `maintenance`,
    `pipelines`, `ingest`, `tenants`, `migrations`. Failures raise `floe_client.FloeError`
    subclasses.
    """

    def __init__(
        self,
        server: str | None = None,
        *,
        client_id: str | None = None,
        client_secret: str | None = None,
        token: str | None = None,
        flight: str | None = None,
        warehouse: str | None = None,
        profile: str | None = None,
        credentials_file: str | os.PathLike | None = None,
        verify: bool | str = True,
    ) -> None:
        """`verify` is requests' (a CA bundle path, or False); the same CA is trusted for
        Flight SQL over TLS (`flight="grpc+tls://…"`)."""
        self.settings: Settings = resolve(
            server=server,
            client_id=client_id,
            client_secret=client_secret,
            token=token,
            flight=flight,
            warehouse=warehouse,
            profile=profile,
            credentials_file=credentials_file,
            verify=verify,
        )
        self._transport = Transport(self.settings)
        self.warehouses = Warehouses(self._transport)
        self.protection = Protection(self._transport)
        self.principals = Principals(self._transport)
        self.roles = Roles(self._transport)
        self.grants = Grants(self._transport)
        self.data_policies = DataPolicies(self._transport)
        self.audit = Audit(self._transport)
        self.jobs = Jobs(self._transport)
        self.policies = Policies(self._transport)
        self.maintenance = Maintenance(self._transport)
        self.pipelines = Pipelines(self._transport)
        self.ingest = Ingest(self._transport)
        self.tenants = Tenants(self._transport)
        self.migrations = Migrations(self._transport)

    def __repr__(self) -> str:
        who = self.settings.client_id or "<bearer token>"
        return f"Client(server={self.settings.server!r}, client_id={who!r}, source={self.settings.source!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._transport.session.close()

    @property
    def tokens(self) -> TokenSource:
        """The client's tokens (`tokens.token()` is a current bearer token)."""
        return self._transport.tokens

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Any authenticated request to a path below the server (e.g. `/catalog/v1/config`),
        with the client's token and errors; answers the decoded JSON body. `kwargs` go to
        `requests` (`params`, `json`, `data`, `headers`, `timeout`)."""
        return self._transport.request(method, path, **kwargs)

    def whoami(self) -> dict[str, Any]:
        return self.principals.whoami()

    def workers(self) -> list[ListWorkersResponseWorkersItem]:
        """Registered query workers (tag `cluster`)."""
        return self._transport.call("listWorkers")["workers"]

    def sql_json(
        self, statement: str, *, warehouse: str | None = None, namespace: str | None = None
    ) -> RunSqlResponse:
        """Runs one statement through `POST /api/v1/sql`; rows come back as JSON objects.
        For Arrow results use `sql`."""
        body = {"sql": statement}
        if warehouse or self.settings.warehouse:
            body["warehouse"] = warehouse or self.settings.warehouse
        if namespace:
            body["namespace"] = namespace
        answer = self._transport.call("runSql", body=body)
        # A result that failed after its first rows were sent ends with an error object.
        if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
            raise errors.from_body(int(answer["error"].get("code") or 500), answer, "")
        return answer

    def catalog(self, warehouse: str | None = None, name: str = "floe", **properties: Any) -> RestCatalog:
        """A PyIceberg REST catalog for `warehouse` (default: the client's, else `default`).

        The catalog takes its bearer tokens from this client, so it shares one token, its
        refreshes, and never holds the client secret in its properties. `properties` are
        passed on (e.g. `s3.endpoint` for an S3 warehouse without credential vending)."""
        from pyiceberg.catalog.rest import RestCatalog

        props: dict[str, Any] = {
            "uri": self.settings.catalog_uri,
            "warehouse": warehouse or self.settings.warehouse or "default",
            "auth": {
                "type": "custom",
                "impl": "floe_client.iceberg.FloeAuthManager",
                "custom": {"tokens": self._transport.tokens},
            },
        }
        if isinstance(self.settings.verify, str):
            props["ssl"] = {"cabundle": self.settings.verify}
        props.update(properties)
        return RestCatalog(name, **props)

    def sql(
        self,
        statement: str,
        *,
        warehouse: str | None = None,
        namespace: str | None = None,
    ) -> pyarrow.Table:
        """Runs one statement over Arrow Flight SQL and answers its result as an Arrow table.

        `warehouse` and `namespace` say where unqualified names resolve (names may always be
        written `warehouse.namespace.table`). The call authenticates with the client's
        current bearer token; a refused token is refreshed and the statement sent once more
        (only when refused at sign-in, before it ran)."""
        import adbc_driver_flightsql.dbapi as flight_sql
        import adbc_driver_manager

        headers = {}
        if warehouse or self.settings.warehouse:
            headers["x-floe-warehouse"] = warehouse or self.settings.warehouse
        if namespace:
            headers["x-floe-namespace"] = namespace
        tokens = self._transport.tokens
        for attempt in (1, 2):
            token = tokens.token()
            db_kwargs = {"adbc.flight.sql.authorization_header": f"Bearer {token}", **self._flight_tls()}
            for key, value in headers.items():
                db_kwargs[f"adbc.flight.sql.rpc.call_header.{key}"] = value
            try:
                with flight_sql.connect(self.settings.flight, db_kwargs=db_kwargs, autocommit=True) as conn:
                    with conn.cursor() as cursor:
                        cursor.execute(statement)
                        return cursor.fetch_arrow_table()
            except adbc_driver_manager.Error as e:
                error = flight_error(e, token)
                if isinstance(error, errors.Unauthenticated) and attempt == 1 and tokens.refused(token):
                    continue
                raise error from None
        raise AssertionError("unreachable")


    def _flight_tls(self) -> dict[str, str]:
        """`verify` for Flight SQL over TLS: a CA bundle path is trusted, False trusts anything."""
        if not self.settings.flight.startswith("grpc+tls"):
            return {}
        if isinstance(self.settings.verify, str):
            with open(self.settings.verify, encoding="utf-8") as f:
                return {"adbc.flight.sql.client_option.tls_root_certs": f.read()}
        if self.settings.verify is False:
            return {"adbc.flight.sql.client_option.tls_skip_verify": "true"}
        return {}


# ADBC status codes, as the HTTP statuses Floe answers the same failures with.
_ADBC_STATUS = {
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "INVALID_ARGUMENT": 400,
    "INVALID_DATA": 400,
    "INVALID_STATE": 400,
    "UNAUTHENTICATED": 401,
    "UNAUTHORIZED": 403,
    "NOT_IMPLEMENTED": 406,
    "TIMEOUT": 504,
    "INTERNAL": 500,
    "IO": 503,
}


def flight_error(e: Exception, token: str) -> errors.FloeError:
    """A Flight SQL failure as a `FloeError`; the token is cut from the driver's message."""
    code = getattr(getattr(e, "status_code", None), "name", None)
    status = _ADBC_STATUS.get(code or "")
    message = str(e).replace(token, "<redacted>")
    return errors.error_class(status)(message, status=status, error_type=f"FlightSQL {code or 'error'}")
