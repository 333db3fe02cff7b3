"""Securables (what a grant, policy or protection flag is about) and namespace spellings.

    from floe_client import securables as on
    client.grants.grant("analysts", "read-data", on.table("default", "shop", "orders"))
"""

from __future__ import annotations

from typing import Sequence, Union

from .models import SecurableNamespace, SecurableServer, SecurableTable, SecurableView, SecurableWarehouse

Namespace = Union[str, Sequence[str]]
"""A namespace as its levels (`["sales", "eu"]`) or dotted (`"sales.eu"`)."""


def levels(namespace: Namespace) -> list[str]:
    """The levels of a namespace, as request bodies carry them."""
    if isinstance(namespace, str):
        return namespace.split(".")
    return list(namespace)


def dotted(namespace: Namespace | None) -> str | None:
    """A namespace as query parameters carry it: levels joined by '.'."""
    if namespace is None:
        return None
    return namespace if isinstance(namespace, str) else ".".join(namespace)


def server() -> SecurableServer:
    return {"type": "server"}


def warehouse(name: str) -> SecurableWarehouse:
    return {"type": "warehouse", "warehouse": name}


def namespace(warehouse: str, namespace: Namespace) -> SecurableNamespace:
    return {"type": "namespace", "warehouse": warehouse, "namespace": levels(namespace)}


def table(warehouse: str, namespace: Namespace, name: str) -> SecurableTable:
    return {"type": "table", "warehouse": warehouse, "namespace": levels(namespace), "name": name}


def view(warehouse: str, namespace: Namespace, name: str) -> SecurableView:
    return {"type": "view", "warehouse": warehouse, "namespace": levels(namespace), "name": name}
