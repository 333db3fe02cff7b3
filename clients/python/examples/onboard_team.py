"""Onboard a team: a service principal for its jobs, a role holding read access to a
namespace, and the credentials the team stores (printed once, here only their client id).

    FLOE_SERVER=… FLOE_CLIENT_ID=… FLOE_CLIENT_SECRET=… python onboard_team.py [team] [warehouse] [namespace]
"""

import sys

from floe_client import Client, Conflict, securables as on


def onboard(client: Client, team: str, warehouse: str, namespace: str) -> dict:
    principal = f"{team}-jobs"
    role = f"{team}-readers"
    try:
        created = client.principals.create(principal, kind="service")
    except Conflict:
        # Already there: hand out fresh credentials instead.
        created = {"credentials": client.principals.rotate_credentials(principal)}
    if role not in client.roles.list():
        client.roles.create(role)
    client.roles.add_member(role, principal)
    client.grants.grant(role, "read-data", on.namespace(warehouse, namespace))
    client.grants.grant(role, "list-tables", on.namespace(warehouse, namespace))
    return created["credentials"]


if __name__ == "__main__":
    defaults = ["analytics", "default", "shared"]
    team, warehouse, namespace = sys.argv[1:4] + defaults[len(sys.argv[1:4]):]
    with Client() as client:
        credentials = onboard(client, team, warehouse, namespace)
        # The secret goes to the team's secret store, never to a log.
        print(f"created {credentials['client-id']}")
        grants = client.roles.grants(f"{team}-readers")
        print(sorted(g["privilege"] for g in grants))
