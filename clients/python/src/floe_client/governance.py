"""Principals, roles, grants, the audit trail and the access review (tag `governance`)."""

from __future__ import annotations

from typing import Iterator, Literal

from .models import (
    AccessReviewResponse,
    AuditRecord,
    ClientCredentials,
    ColumnMask,
    DataPolicy,
    CreatePrincipalResponse,
    CreateRoleResponse,
    GrantRecord,
    ListAuditResponse,
    Principal,
    Privilege,
    Securable,
)
from .transport import Transport


class Principals:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def list(self) -> list[Principal]:
        return self._t.call("listPrincipals")["principals"]

    def create(self, name: str, kind: Literal["user", "service"] = "service") -> CreatePrincipalResponse:
        """A new principal and its client credentials (shown this once)."""
        return self._t.call("createPrincipal", body={"name": name, "kind": kind})

    def get(self, name: str) -> Principal:
        return self._t.call("getPrincipal", path={"name": name})

    def whoami(self) -> Principal:
        return self._t.call("whoami")

    def rotate_credentials(self, name: str) -> ClientCredentials:
        return self._t.call("rotatePrincipalCredentials", path={"name": name})

    def disable(self, name: str) -> None:
        self._t.call("disablePrincipal", path={"name": name})

    def enable(self, name: str) -> None:
        self._t.call("enablePrincipal", path={"name": name})

    def rotate_signing_key(self) -> str:
        """Signs new tokens with a fresh key; answers its key id."""
        return self._t.call("rotateSigningKey")["kid"]


class Roles:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def list(self) -> list[str]:
        return self._t.call("listRoles")["roles"]

    def create(self, name: str) -> CreateRoleResponse:
        return self._t.call("createRole", body={"name": name})

    def delete(self, name: str) -> None:
        self._t.call("deleteRole", path={"name": name})

    def add_member(self, role: str, principal: str) -> None:
        self._t.call("addRoleMember", path={"name": role}, body={"principal": principal})

    def remove_member(self, role: str, principal: str) -> None:
        self._t.call("removeRoleMember", path={"name": role, "principal": principal})

    def grants(self, role: str) -> list[GrantRecord]:
        return self._t.call("listRoleGrants", path={"name": role})["grants"]


class Grants:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    @staticmethod
    def _body(role: str, privilege: Privilege, on: Securable, securable_id: str | None) -> dict:
        body = {"role": role, "privilege": privilege, "on": on}
        if securable_id is not None:
            body["securable-id"] = securable_id
        return body

    def grant(self, role: str, privilege: Privilege, on: Securable, securable_id: str | None = None) -> None:
        """Grants `privilege` on `on` (see `floe_client.securables`) to `role`."""
        self._t.call("grant", body=self._body(role, privilege, on, securable_id))

    def revoke(self, role: str, privilege: Privilege, on: Securable, securable_id: str | None = None) -> None:
        self._t.call("revoke", body=self._body(role, privilege, on, securable_id))


class DataPolicies:
    """Row and column policies: a role's row filter and column masks on a table
    (docs/governance.md#row-and-column-policies)."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def list(self, role: str | None = None) -> list[DataPolicy]:
        """Every policy (one role's with `role`); needs read-audit on the server."""
        return self._t.call("listPolicies", params={"role": role})["policies"]

    def set(
        self,
        role: str,
        table: Securable,
        *,
        row_filter: str | None = None,
        masks: list[ColumnMask] | None = None,
    ) -> None:
        """Sets (replaces) `role`'s policy on `table` (`securables.table(...)`): rows for
        which `row_filter` is true, columns masked as `masks` say
        (`{"column": "ssn", "mask": "null"}`; masks are hide, null, hash, expression)."""
        body: dict = {"role": role, "table": table, "masks": list(masks or [])}
        if row_filter is not None:
            body["row-filter"] = row_filter
        self._t.call("setPolicy", body=body)

    def remove(self, role: str, table: Securable) -> None:
        self._t.call("removePolicy", body={"role": role, "table": table})


class Audit:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def list(
        self,
        *,
        principal: str | None = None,
        action: str | None = None,
        resource: str | None = None,
        decision: Literal["allow", "deny"] | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        after_seq: int | None = None,
        limit: int | None = None,
        order: Literal["asc", "desc"] | None = None,
        before_seq: int | None = None,
        status_class: Literal["1xx", "2xx", "3xx", "4xx", "5xx"] | None = None,
    ) -> ListAuditResponse:
        """One page of audit records, oldest first (`next-after-seq` continues it), or with
        `order="desc"` newest first (`next-before-seq` continues it)."""
        return self._t.call(
            "listAudit",
            params={
                "principal": principal,
                "action": action,
                "resource": resource,
                "decision": decision,
                "since-ms": since_ms,
                "until-ms": until_ms,
                "after-seq": after_seq,
                "limit": limit,
                "order": order,
                "before-seq": before_seq,
                "status-class": status_class,
            },
        )

    def records(self, **filters) -> Iterator[AuditRecord]:
        """Every record the filters (those of `list`) match, page after page."""
        after = filters.pop("after_seq", None)
        while True:
            page = self.list(after_seq=after, **filters)
            yield from page.get("records", [])
            after = page.get("next-after-seq")
            if after is None or not page.get("records"):
                return

    def access_review(self) -> AccessReviewResponse:
        """Every principal with its roles and the privileges they carry."""
        return self._t.call("accessReview")
