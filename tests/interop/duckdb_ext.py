"""DuckDB connections with the httpfs, avro and iceberg extensions loaded from
the ``duckdb-ext-*`` PyPI wheels (installed by scripts/setup-python.sh).

DuckDB's own extension site is unreachable in this environment, so nothing may
be downloaded at run time: auto-install is switched off and every extension is
LOADed from the ``.duckdb_extension`` file that its wheel ships, e.g.
``site-packages/duckdb_ext/extensions/v1.4.4/linux_amd64/iceberg.duckdb_extension``.
That folder tree has the layout of a DuckDB extension directory, so it is also
set as ``extension_directory`` for any auto-loading DuckDB does on its own.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import duckdb

EXTENSIONS = ("httpfs", "avro", "iceberg")


def extension_path(name: str) -> Path:
    """Path of ``<name>.duckdb_extension`` inside the ``duckdb-ext-<name>`` wheel."""
    dist = f"duckdb-ext-{name}"
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError as e:
        raise RuntimeError(f"{dist} is not installed (run scripts/setup-python.sh)") from e
    for f in files:
        if f.name == f"{name}.duckdb_extension":
            path = Path(f.locate()).resolve()
            if path.is_file():
                return path
    raise RuntimeError(f"{dist} does not contain {name}.duckdb_extension")


def extension_directory() -> Path:
    """The ``.../duckdb_ext/extensions`` folder (holds ``v<ver>/<platform>/*.duckdb_extension``)."""
    # <dir>/v1.4.4/linux_amd64/iceberg.duckdb_extension -> <dir>
    return extension_path("iceberg").parents[2]


def connect(database: str = ":memory:", config: dict | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with httpfs, avro and iceberg loaded, without any network access."""
    cfg = {
        "allow_unsigned_extensions": "true",
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "true",
        "extension_directory": str(extension_directory()),
    }
    cfg.update(config or {})
    con = duckdb.connect(database, config=cfg)
    try:
        for name in EXTENSIONS:
            path = str(extension_path(name)).replace("'", "''")
            con.execute(f"LOAD '{path}'")
    except Exception:
        con.close()
        raise
    return con


if __name__ == "__main__":
    with connect() as c:
        for row in c.execute(
            "SELECT extension_name, loaded, install_path FROM duckdb_extensions() WHERE loaded ORDER BY 1"
        ).fetchall():
            print(*row)
