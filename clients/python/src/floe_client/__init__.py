"""Python client for Floe.

    from floe_client import Client
    client = Client()                       # FLOE_SERVER / FLOE_CLIENT_ID / FLOE_CLIENT_SECRET
    client.warehouses.list()
    catalog = client.catalog("default")     # a PyIceberg RestCatalog
    table = client.sql("SELECT 1 AS one")   # a pyarrow.Table, over Flight SQL

See clients/python/README.md.
"""

from . import models, securables
from .client import Client
from .config import Secret, Settings, profile_path
from .errors import (
    BadRequest,
    CommitStateUnknown,
    ConfigurationError,
    Conflict,
    FloeError,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    ServerError,
    Timeout,
    TooManyRequests,
    Unauthenticated,
    Unavailable,
    Unsupported,
)
from .transport import OPERATIONS

__version__ = "0.1.0"

__all__ = [
    "BadRequest",
    "Client",
    "CommitStateUnknown",
    "ConfigurationError",
    "Conflict",
    "FloeError",
    "Forbidden",
    "NotFound",
    "OPERATIONS",
    "PayloadTooLarge",
    "QuotaExceeded",
    "Secret",
    "ServerError",
    "Settings",
    "Timeout",
    "TooManyRequests",
    "Unauthenticated",
    "Unavailable",
    "Unsupported",
    "models",
    "profile_path",
    "securables",
]
