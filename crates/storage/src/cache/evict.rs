//! Which hot files leave the hot tier, decided from the index alone (no IO), so the order can
//! be tested without a disk.
//!
//! Three rules, applied in this order:
//!
//! 1. **Age.** A file committed longer ago than its tenant's window leaves.
//! 2. **The tenant's share.** A tenant whose hot bytes (with the file it is admitting) pass its
//!    share loses its own oldest files until they fit. Nobody else's files move for it.
//! 3. **The node's pressure.** When the tier as a whole (with the incoming file) passes its
//!    capacity, the tenant furthest over an equal split of the capacity among the tenants
//!    holding hot files loses its oldest file, again and again until it fits. A tenant inside
//!    its equal split is never touched while another is over it, so a tenant that writes a lot
//!    evicts its own files first, not its neighbours'.
//!
//! A file that cannot fit without breaking these rules (larger than its tenant's share or the
//! tier, or a tenant that would have to evict a neighbour inside its split) is not admitted:
//! it stays in object storage and the ordinary cache, as every file did before the hot tier.

use std::collections::HashMap;

/// What the planner needs of one hot file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resident<'a> {
    pub id: &'a str,
    pub tenant: &'a str,
    pub bytes: u64,
    pub committed_ms: i64,
}

/// A tenant's hot-tier settings, as its limits set them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HotPolicy {
    /// How long after its commit a file stays hot (milliseconds).
    pub window_ms: i64,
    /// The most bytes of the tenant's hot files this node keeps.
    pub share_bytes: u64,
}

/// The files to move out, and whether the incoming file is let in.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Past their tenant's window.
    pub expired: Vec<String>,
    /// Moved out to make room (over a share, or the node full).
    pub pressed: Vec<String>,
    pub admit: bool,
}

/// Plans the tier's evictions at `now_ms` with `incoming` (tenant, bytes) to be admitted, if
/// any. `policy` gives each tenant's settings; `capacity` bounds the whole tier.
pub(crate) fn plan(
    files: &[Resident<'_>],
    policy: &dyn Fn(&str) -> HotPolicy,
    capacity: u64,
    now_ms: i64,
    incoming: Option<(&str, u64)>,
) -> Plan {
    let mut out = Plan::default();
    // Each tenant's files, oldest first.
    let mut by_tenant: HashMap<&str, Vec<&Resident<'_>>> = HashMap::new();
    for file in files {
        let window = policy(file.tenant).window_ms;
        if file.committed_ms < now_ms.saturating_sub(window) {
            out.expired.push(file.id.to_string());
        } else {
            by_tenant.entry(file.tenant).or_default().push(file);
        }
    }
    for list in by_tenant.values_mut() {
        list.sort_by(|a, b| (a.committed_ms, a.id).cmp(&(b.committed_ms, b.id)));
        list.reverse(); // pop() takes the oldest
    }
    let held = |list: &Vec<&Resident<'_>>| list.iter().map(|f| f.bytes).sum::<u64>();
    let mut bytes: HashMap<&str, u64> = by_tenant.iter().map(|(t, l)| (*t, held(l))).collect();
    out.admit = match incoming {
        Some((tenant, size)) => {
            let own = policy(tenant);
            own.window_ms > 0 && size <= own.share_bytes && size <= capacity
        }
        None => false,
    };
    // Rule 2: every tenant within its share, the incoming file counted with its tenant.
    let tenants: Vec<&str> = by_tenant.keys().copied().collect();
    for tenant in tenants {
        let extra = match incoming {
            Some((t, size)) if t == tenant && out.admit => size,
            _ => 0,
        };
        let share = policy(tenant).share_bytes;
        let list = by_tenant.get_mut(tenant).expect("listed");
        let total = bytes.get_mut(tenant).expect("counted");
        while *total + extra > share {
            let Some(oldest) = list.pop() else { break };
            *total -= oldest.bytes;
            out.pressed.push(oldest.id.to_string());
        }
    }
    // Rule 3: the node's capacity, taken from whoever is furthest over an equal split.
    let incoming_bytes = incoming.filter(|_| out.admit).map_or(0, |(_, size)| size);
    let mut holders: Vec<&str> = bytes.keys().copied().collect();
    if let Some((tenant, _)) = incoming.filter(|_| out.admit)
        && !bytes.contains_key(tenant)
    {
        holders.push(tenant);
    }
    let fair = capacity / holders.len().max(1) as u64;
    loop {
        let total: u64 = bytes.values().sum::<u64>() + incoming_bytes * u64::from(out.admit);
        if total <= capacity {
            break;
        }
        let weight = |tenant: &str| {
            let own = bytes.get(tenant).copied().unwrap_or(0);
            let coming = match incoming {
                Some((t, size)) if t == tenant && out.admit => size,
                _ => 0,
            };
            own + coming
        };
        let Some(worst) = holders
            .iter()
            .copied()
            .filter(|t| weight(t) > 0)
            .max_by_key(|t| (weight(t).saturating_sub(fair), weight(t), *t))
        else {
            break;
        };
        let popped = by_tenant.get_mut(worst).and_then(|list| list.pop());
        match popped {
            Some(oldest) => {
                *bytes.get_mut(worst).expect("counted") -= oldest.bytes;
                out.pressed.push(oldest.id.to_string());
            }
            // Only the incoming file is left of the worst tenant: it stays out.
            None => out.admit = false,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;

    fn file<'a>(id: &'a str, tenant: &'a str, bytes: u64, committed_ms: i64) -> Resident<'a> {
        Resident {
            id,
            tenant,
            bytes,
            committed_ms,
        }
    }

    fn policies(share_a: u64, share_b: u64) -> impl Fn(&str) -> HotPolicy {
        move |tenant| HotPolicy {
            window_ms: 24 * HOUR,
            share_bytes: if tenant == "a" { share_a } else { share_b },
        }
    }

    #[test]
    fn a_tenant_over_its_share_evicts_its_own_oldest_files_first() {
        let now = 100 * HOUR;
        let files = [
            file("a1", "a", 10, now - 5 * HOUR),
            file("b1", "b", 10, now - 6 * HOUR),
            file("a2", "a", 10, now - 3 * HOUR),
            file("a3", "a", 10, now - 2 * HOUR),
        ];
        // a holds 30 of its 30; another 15 of a's must push out a1 and a2, never b1 (older).
        let plan = plan(&files, &policies(30, 30), 1000, now, Some(("a", 15)));
        assert_eq!(plan.pressed, ["a1", "a2"]);
        assert!(plan.expired.is_empty());
        assert!(plan.admit);
        // Larger than the share: not admitted, nothing moved for it.
        let plan = super::plan(&files, &policies(30, 30), 1000, now, Some(("a", 31)));
        assert!(!plan.admit);
        assert!(plan.pressed.is_empty());
    }

    #[test]
    fn files_past_their_window_leave() {
        let now = 100 * HOUR;
        let files = [
            file("old", "a", 10, now - 25 * HOUR),
            file("new", "a", 10, now - HOUR),
            file("b", "b", 10, now - 2 * HOUR),
        ];
        let short = |tenant: &str| HotPolicy {
            window_ms: if tenant == "b" { HOUR } else { 24 * HOUR },
            share_bytes: 100,
        };
        let plan = plan(&files, &short, 1000, now, None);
        let mut expired = plan.expired.clone();
        expired.sort();
        assert_eq!(expired, ["b", "old"]);
        assert!(plan.pressed.is_empty());
    }

    #[test]
    fn a_full_node_takes_from_the_tenant_furthest_over_an_equal_split() {
        let now = 100 * HOUR;
        // Capacity 40: a split of 20 each. b holds 10 (inside), a holds 30 (10 over).
        let files = [
            file("b1", "b", 10, now - 9 * HOUR),
            file("a1", "a", 10, now - 3 * HOUR),
            file("a2", "a", 10, now - 2 * HOUR),
            file("a3", "a", 10, now - HOUR),
        ];
        // b's new file needs 10 more bytes: a's oldest goes, not b's older one.
        let plan = plan(&files, &policies(100, 100), 40, now, Some(("b", 10)));
        assert_eq!(plan.pressed, ["a1"]);
        assert!(plan.admit);
        // a's new file: a is the one over, so it loses its own oldest.
        let plan = super::plan(&files, &policies(100, 100), 40, now, Some(("a", 10)));
        assert_eq!(plan.pressed, ["a1"]);
        assert!(plan.admit);
    }

    #[test]
    fn a_tenant_inside_its_split_is_not_evicted_for_another() {
        let now = 100 * HOUR;
        // Capacity 20, two tenants: a split of 10 each; b holds its 10.
        let files = [file("b1", "b", 10, now - HOUR)];
        // a's file of 15 would need b's: it stays out, b keeps its file.
        let plan = plan(&files, &policies(100, 100), 20, now, Some(("a", 15)));
        assert!(plan.pressed.is_empty());
        assert!(!plan.admit);
    }
}
