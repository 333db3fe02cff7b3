"""A SOX-style access review: every principal, its roles and privileges, and who changed
grants recently (from the audit trail), as CSV on stdout.

    FLOE_SERVER=… FLOE_CLIENT_ID=… FLOE_CLIENT_SECRET=… python access_review.py
"""

import csv
import sys
import time

from floe_client import Client


def main() -> None:
    with Client() as client:
        review = client.audit.access_review()
        out = csv.writer(sys.stdout)
        out.writerow(["principal", "kind", "disabled", "role", "privilege", "securable"])
        for entry in review["principals"]:
            privileges = entry.get("privileges")
            if privileges == "all" or entry.get("root"):
                out.writerow([entry["principal"], entry.get("kind"), entry.get("disabled"), "", "all", "server"])
                continue
            for grant in privileges or []:
                out.writerow(
                    [
                        entry["principal"],
                        entry.get("kind"),
                        entry.get("disabled"),
                        grant.get("role"),
                        grant.get("privilege"),
                        f"{grant.get('securable-kind')}:{grant.get('securable-id')}",
                    ]
                )
        day_ago = int((time.time() - 86_400) * 1000)
        changes = [
            r
            for action in ("POST /api/v1/grants", "POST /api/v1/grants/revoke")
            for r in client.audit.records(action=action, since_ms=day_ago)
        ]
        print(f"# grant changes in the last day: {len(changes)}", file=sys.stderr)


if __name__ == "__main__":
    main()
