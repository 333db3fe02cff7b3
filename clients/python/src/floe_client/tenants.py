"""Per-tenant (per-warehouse) limits and usage (tag `tenants`)."""

from __future__ import annotations

from .models import GetTenantLimitsResponse, SetTenantLimitsResponse, TenantLimits
from .transport import Transport


class Tenants:
    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def limits(self, warehouse: str) -> GetTenantLimitsResponse:
        """The tenant's limits and usage."""
        return self._t.call("getTenantLimits", path={"warehouse": warehouse})

    def set_limits(self, warehouse: str, limits: TenantLimits) -> SetTenantLimitsResponse:
        """Replaces the tenant's limits (an absent field is no limit)."""
        return self._t.call("setTenantLimits", path={"warehouse": warehouse}, body=dict(limits))

    def delete_limits(self, warehouse: str) -> None:
        self._t.call("deleteTenantLimits", path={"warehouse": warehouse})
