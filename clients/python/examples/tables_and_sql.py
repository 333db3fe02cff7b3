"""Write a table with PyIceberg through the client's catalog, then query it over Flight SQL.

    FLOE_SERVER=… FLOE_CLIENT_ID=… FLOE_CLIENT_SECRET=… FLOE_FLIGHT=grpc://host:50051 python tables_and_sql.py
"""

import pyarrow as pa
from pyiceberg.exceptions import NamespaceAlreadyExistsError

from floe_client import Client

with Client() as client:
    catalog = client.catalog("default")
    try:
        catalog.create_namespace("examples")
    except NamespaceAlreadyExistsError:
        pass
    if catalog.table_exists("examples.visits"):
        catalog.drop_table("examples.visits")
    visits = catalog.create_table(
        "examples.visits", schema=pa.schema([("page", pa.string()), ("ms", pa.int64())])
    )
    visits.append(pa.table({"page": ["/", "/docs", "/", "/pricing"], "ms": [120, 340, 95, 210]}))

    result = client.sql(
        "SELECT page, count(*) AS visits, avg(ms) AS avg_ms FROM default.examples.visits "
        "GROUP BY page ORDER BY visits DESC, page"
    )
    assert isinstance(result, pa.Table)
    for row in result.to_pylist():
        print(f"{row['page']:10} {row['visits']:3} {row['avg_ms']:8.1f}")
