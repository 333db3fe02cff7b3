//! The `JobStore` part of the suite: maintenance jobs and policies.

use std::collections::HashMap;
use std::sync::Arc;

use floe_catalog::jobs::{JobFilter, JobOutcome, JobRecord, JobStatus, JobStore, NewJob};
use floe_catalog::model::*;
use floe_catalog::store::CatalogStore;
use uuid::Uuid;

use super::{ns, tabular, warehouse};

/// A logical clock far from the wall clock: job timestamps the store takes itself (creation)
/// never mix with the ones the caller passes.
const T0: i64 = 1_000_000;
/// Later than any time a scenario uses.
const T_END: i64 = 1 << 40;
const LEASE: i64 = 60_000;

fn new_job(warehouse_id: Uuid, table_id: Uuid, kind: &str, priority: i32) -> NewJob {
    NewJob {
        warehouse_id,
        table_id,
        kind: kind.into(),
        priority,
        trigger: "request".into(),
        max_attempts: 3,
        params: serde_json::json!({ "target-file-size": 128 }),
        not_before_ms: 0,
    }
}

async fn enqueue(jobs: &Arc<dyn JobStore>, job: NewJob) -> Uuid {
    jobs.enqueue_job(&job).await.unwrap().expect("job queued")
}

async fn claim(jobs: &Arc<dyn JobStore>, owner: &str, now: i64, cap: usize) -> Option<JobRecord> {
    jobs.claim_job(owner, now, LEASE, cap).await.unwrap()
}

async fn claim_id(jobs: &Arc<dyn JobStore>, now: i64, cap: usize) -> Option<Uuid> {
    claim(jobs, "node-a", now, cap).await.map(|j| j.id)
}

async fn succeed(jobs: &Arc<dyn JobStore>, id: Uuid, owner: &str, now: i64) -> bool {
    jobs.finish_job(
        id,
        owner,
        now,
        &JobOutcome::Succeeded(serde_json::json!({ "ok": true })),
    )
    .await
    .unwrap()
}

/// Runs every claimable job to success, so a scenario starts with an empty queue; returns
/// how many there were.
async fn drain(jobs: &Arc<dyn JobStore>) -> usize {
    let mut n = 0;
    while let Some(job) = claim(jobs, "drain", T_END, usize::MAX).await {
        assert!(succeed(jobs, job.id, "drain", T_END).await);
        n += 1;
    }
    n
}

/// Maintenance jobs: dedup, claim order and fairness, leases, retries, listings, policies.
pub async fn jobs(store: Arc<dyn CatalogStore>, jobs: Arc<dyn JobStore>) {
    jobs_dedup(&jobs).await;
    jobs_claim_order(&jobs).await;
    jobs_warehouse_cap(&jobs).await;
    jobs_fairness(&jobs).await;
    jobs_concurrent_claims(&jobs).await;
    jobs_lease_takeover(&jobs).await;
    jobs_release(&jobs).await;
    jobs_retry(&jobs).await;
    jobs_listing(&jobs).await;
    jobs_policies(&store, &jobs).await;
}

async fn jobs_dedup(jobs: &Arc<dyn JobStore>) {
    assert_eq!(drain(jobs).await, 0, "no job is left from elsewhere");
    let (wh, t1, t2) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let id = enqueue(jobs, new_job(wh, t1, "compact", 3)).await;
    let queued = jobs.get_job(id).await.unwrap().unwrap();
    assert_eq!(queued.status, JobStatus::Queued);
    assert_eq!((queued.warehouse_id, queued.table_id), (wh, t1));
    assert_eq!(queued.kind, "compact");
    assert_eq!(queued.priority, 3);
    assert_eq!(queued.trigger, "request");
    assert_eq!((queued.attempts, queued.max_attempts), (0, 3));
    assert_eq!(
        queued.params,
        serde_json::json!({ "target-file-size": 128 })
    );
    assert_eq!(queued.lease_owner, None);
    assert_eq!(queued.started_at_ms, None);
    assert!(jobs.get_job(Uuid::now_v7()).await.unwrap().is_none());

    // Queued: an equal job is not queued again; another kind or table is.
    let dup = jobs
        .enqueue_job(&new_job(wh, t1, "compact", 9))
        .await
        .unwrap();
    assert_eq!(dup, None);
    enqueue(jobs, new_job(wh, t1, "expire-snapshots", 3)).await;
    enqueue(jobs, new_job(wh, t2, "compact", 3)).await;

    // Running: still deduplicated.
    let running = claim(jobs, "node-a", T0, 10).await.unwrap();
    assert_eq!(running.id, id, "equal priorities run oldest first");
    assert_eq!(running.status, JobStatus::Running);
    assert_eq!(running.attempts, 1);
    assert_eq!(running.lease_owner.as_deref(), Some("node-a"));
    assert_eq!(running.lease_until_ms, Some(T0 + LEASE));
    assert_eq!(running.started_at_ms, Some(T0));
    let dup = jobs
        .enqueue_job(&new_job(wh, t1, "compact", 3))
        .await
        .unwrap();
    assert_eq!(dup, None);

    // Finished: a new one can be queued.
    assert!(succeed(jobs, id, "node-a", T0 + 5).await);
    let done = jobs.get_job(id).await.unwrap().unwrap();
    assert_eq!(done.status, JobStatus::Succeeded);
    assert_eq!(done.result, Some(serde_json::json!({ "ok": true })));
    assert_eq!(done.finished_at_ms, Some(T0 + 5));
    assert_eq!((done.lease_owner, done.lease_until_ms), (None, None));
    assert!(!succeed(jobs, id, "node-a", T0 + 6).await, "finished once");
    let again = enqueue(jobs, new_job(wh, t1, "compact", 3)).await;
    assert_ne!(again, id);
    assert_eq!(drain(jobs).await, 3);
}

async fn jobs_claim_order(jobs: &Arc<dyn JobStore>) {
    assert_eq!(drain(jobs).await, 0);
    let wh = Uuid::now_v7();
    let table = Uuid::now_v7;
    let low = enqueue(jobs, new_job(wh, table(), "compact", 1)).await;
    let high_old = enqueue(jobs, new_job(wh, table(), "compact", 5)).await;
    let high_new = enqueue(jobs, new_job(wh, table(), "compact", 5)).await;
    let lowest = enqueue(jobs, new_job(wh, table(), "compact", 0)).await;
    let later = enqueue(
        jobs,
        NewJob {
            not_before_ms: T0 + 100,
            ..new_job(wh, table(), "compact", 9)
        },
    )
    .await;
    let mut order = Vec::new();
    while let Some(id) = claim_id(jobs, T0, 10).await {
        order.push(id);
    }
    assert_eq!(order, vec![high_old, high_new, low, lowest]);
    assert_eq!(claim_id(jobs, T0 + 99, 10).await, None, "not due yet");
    assert_eq!(claim_id(jobs, T0 + 100, 10).await, Some(later));
    for id in [low, high_old, high_new, lowest, later] {
        assert!(succeed(jobs, id, "node-a", T0 + 200).await);
    }

    // A delayed job expedited becomes due now and outranks older ones.
    let old = enqueue(jobs, new_job(wh, table(), "compact", 5)).await;
    let delayed = enqueue(
        jobs,
        NewJob {
            not_before_ms: T0 + 10_000,
            ..new_job(wh, table(), "compact", 1)
        },
    )
    .await;
    assert!(jobs.expedite_job(delayed, T0 + 300, 100).await.unwrap());
    assert_eq!(claim_id(jobs, T0 + 300, 10).await, Some(delayed));
    assert!(
        !jobs.expedite_job(delayed, T0 + 300, 100).await.unwrap(),
        "a running job is not queued"
    );
    assert_eq!(claim_id(jobs, T0 + 300, 10).await, Some(old));
    for id in [old, delayed] {
        assert!(succeed(jobs, id, "node-a", T0 + 400).await);
    }
}

async fn jobs_warehouse_cap(jobs: &Arc<dyn JobStore>) {
    assert_eq!(drain(jobs).await, 0);
    let wh = Uuid::now_v7();
    for _ in 0..3 {
        enqueue(jobs, new_job(wh, Uuid::now_v7(), "compact", 1)).await;
    }
    let first = claim_id(jobs, T0, 2).await.unwrap();
    claim_id(jobs, T0, 2).await.unwrap();
    assert_eq!(claim_id(jobs, T0, 2).await, None, "two running is the cap");
    assert!(
        claim_id(jobs, T0, 3).await.is_some(),
        "a higher cap admits it"
    );
    assert!(succeed(jobs, first, "node-a", T0 + 1).await);
    assert_eq!(
        claim_id(jobs, T0 + LEASE, 1).await,
        None,
        "leases held to their end"
    );
    // Expired leases do not count: with a cap of one, one of them is taken over.
    let taken = claim(jobs, "node-b", T0 + LEASE + 1, 1).await.unwrap();
    assert_eq!(taken.lease_owner.as_deref(), Some("node-b"));
    assert_eq!(
        claim_id(jobs, T0 + LEASE + 1, 1).await,
        None,
        "node-b's lease counts"
    );
    assert_eq!(drain(jobs).await, 2);
}

async fn jobs_fairness(jobs: &Arc<dyn JobStore>) {
    assert_eq!(drain(jobs).await, 0);
    let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let mut a_jobs = Vec::new();
    for _ in 0..10 {
        a_jobs.push(enqueue(jobs, new_job(a, Uuid::now_v7(), "compact", 5)).await);
    }
    assert_eq!(claim_id(jobs, T0, 2).await, Some(a_jobs[0]));
    // B's job is newer and of lower priority, but B runs nothing while A runs one.
    let b1 = enqueue(jobs, new_job(b, Uuid::now_v7(), "compact", 1)).await;
    assert_eq!(claim_id(jobs, T0 + 1, 2).await, Some(b1));
    // One each: A started least recently.
    assert_eq!(claim_id(jobs, T0 + 2, 2).await, Some(a_jobs[1]));
    // A is at the cap and B has nothing queued.
    assert_eq!(claim_id(jobs, T0 + 3, 2).await, None);
    // B and C run nothing; B started a job before, C never did.
    assert!(succeed(jobs, b1, "node-a", T0 + 4).await);
    let b2 = enqueue(jobs, new_job(b, Uuid::now_v7(), "compact", 9)).await;
    let c1 = enqueue(jobs, new_job(c, Uuid::now_v7(), "compact", 1)).await;
    assert_eq!(claim_id(jobs, T0 + 5, 2).await, Some(c1));
    assert_eq!(claim_id(jobs, T0 + 6, 2).await, Some(b2));
    assert_eq!(claim_id(jobs, T0 + 7, 2).await, None);
    // Fewest running beats least recent start: A started longest ago but runs one, C none.
    assert!(succeed(jobs, a_jobs[0], "node-a", T0 + 8).await);
    assert!(succeed(jobs, c1, "node-a", T0 + 8).await);
    let c2 = enqueue(jobs, new_job(c, Uuid::now_v7(), "compact", 1)).await;
    assert_eq!(claim_id(jobs, T0 + 9, 2).await, Some(c2));
    for id in [a_jobs[1], b2, c2] {
        assert!(succeed(jobs, id, "node-a", T0 + 10).await);
    }
    assert_eq!(drain(jobs).await, 8);
}

/// Racing claims (other nodes) never exceed the cap nor share a job.
async fn jobs_concurrent_claims(jobs: &Arc<dyn JobStore>) {
    assert_eq!(drain(jobs).await, 0);
    let wh = Uuid::now_v7();
    for _ in 0..6 {
        enqueue(jobs, new_job(wh, Uuid::now_v7(), "compact", 1)).await;
    }
    let mut tasks = Vec::new();
    for i in 0..8 {
        let jobs = jobs.clone();
        tasks.push(tokio::spawn(async move {
            jobs.claim_job(&format!("node-{i}"), T0, LEASE, 2)
                .await
                .unwrap()
                .map(|j| j.id)
        }));
    }
    let mut claimed = Vec::new();
    for task in tasks {
        claimed.extend(task.await.unwrap());
    }
    claimed.sort();
    claimed.dedup();
    assert_eq!(claimed.len(), 2, "{claimed:?}");
    assert_eq!(drain(jobs).await, 6);
}

async fn jobs_lease_takeover(jobs: &Arc<dyn JobStore>) {
    assert_eq!(drain(jobs).await, 0);
    let id = enqueue(jobs, new_job(Uuid::now_v7(), Uuid::now_v7(), "compact", 1)).await;
    let a = jobs
        .claim_job("node-a", T0, 1_000, 5)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a.id, a.lease_until_ms), (id, Some(T0 + 1_000)));
    let claim_b = |now| jobs.claim_job("node-b", now, 1_000, 5);
    assert!(claim_b(T0 + 500).await.unwrap().is_none(), "lease held");
    assert!(
        jobs.renew_job_lease(id, "node-a", T0 + 2_000)
            .await
            .unwrap()
    );
    assert!(
        !jobs
            .renew_job_lease(id, "node-b", T0 + 9_000)
            .await
            .unwrap()
    );
    assert!(
        claim_b(T0 + 1_500).await.unwrap().is_none(),
        "lease renewed"
    );
    assert!(
        claim_b(T0 + 2_000).await.unwrap().is_none(),
        "lease ends after"
    );
    let b = claim_b(T0 + 2_001)
        .await
        .unwrap()
        .expect("expired lease taken over");
    assert_eq!(b.id, id);
    assert_eq!(b.lease_owner.as_deref(), Some("node-b"));
    assert_eq!(b.lease_until_ms, Some(T0 + 3_001));
    assert_eq!(b.attempts, 2);
    assert_eq!(b.started_at_ms, Some(T0 + 2_001));
    // The old owner has lost the job: it may neither renew nor report.
    assert!(
        !jobs
            .renew_job_lease(id, "node-a", T0 + 9_000)
            .await
            .unwrap()
    );
    assert!(!succeed(jobs, id, "node-a", T0 + 2_002).await);
    let failed = JobOutcome::Failed {
        error: "late".into(),
        retry_at_ms: T0,
    };
    assert!(
        !jobs
            .finish_job(id, "node-a", T0 + 2_002, &failed)
            .await
            .unwrap()
    );
    let now = jobs.get_job(id).await.unwrap().unwrap();
    assert_eq!(now.status, JobStatus::Running);
    assert_eq!(now.lease_owner.as_deref(), Some("node-b"));
    assert_eq!(now.lease_until_ms, Some(T0 + 3_001));
    assert_eq!(now.error, None);
    assert!(succeed(jobs, id, "node-b", T0 + 2_500).await);
    assert!(
        !jobs
            .renew_job_lease(id, "node-b", T0 + 9_000)
            .await
            .unwrap(),
        "finished"
    );

    // A job whose node dies in every attempt fails once its attempts are spent.
    let doomed = enqueue(
        jobs,
        NewJob {
            max_attempts: 2,
            ..new_job(Uuid::now_v7(), Uuid::now_v7(), "compact", 1)
        },
    )
    .await;
    assert_eq!(claim_id(jobs, T0 + 100_000, 10).await, Some(doomed));
    assert_eq!(
        claim_id(jobs, T0 + 200_000, 10).await,
        Some(doomed),
        "taken over once"
    );
    assert_eq!(
        claim_id(jobs, T0 + 300_000, 10).await,
        None,
        "not a third time"
    );
    let failed = jobs.get_job(doomed).await.unwrap().unwrap();
    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!(failed.attempts, 2);
    assert!(failed.error.unwrap().contains("every attempt"));
}

/// A node that stops gives its jobs back: queued at once, the attempt not spent, and only by
/// the node holding the job.
async fn jobs_release(jobs: &Arc<dyn JobStore>) {
    assert_eq!(drain(jobs).await, 0);
    let id = enqueue(
        jobs,
        NewJob {
            max_attempts: 1,
            ..new_job(Uuid::now_v7(), Uuid::now_v7(), "compact", 1)
        },
    )
    .await;
    let held = claim(jobs, "node-a", T0, 10).await.unwrap();
    assert_eq!((held.id, held.attempts), (id, 1));
    assert!(!jobs.release_job(id, "node-b", T0 + 1).await.unwrap());
    assert!(jobs.release_job(id, "node-a", T0 + 1).await.unwrap());
    assert!(
        !jobs.release_job(id, "node-a", T0 + 2).await.unwrap(),
        "released once"
    );
    let queued = jobs.get_job(id).await.unwrap().unwrap();
    assert_eq!(queued.status, JobStatus::Queued);
    assert_eq!((queued.attempts, queued.lease_owner), (0, None));
    // Claimable at once by another node, though its one attempt was started before.
    let again = claim(jobs, "node-b", T0 + 2, 10).await.unwrap();
    assert_eq!((again.id, again.attempts), (id, 1));
    assert!(succeed(jobs, id, "node-b", T0 + 3).await);
}

async fn jobs_retry(jobs: &Arc<dyn JobStore>) {
    assert_eq!(drain(jobs).await, 0);
    let (wh, table) = (Uuid::now_v7(), Uuid::now_v7());
    let id = enqueue(
        jobs,
        NewJob {
            max_attempts: 2,
            ..new_job(wh, table, "compact", 1)
        },
    )
    .await;
    let fail = |error: &str, retry_at_ms| JobOutcome::Failed {
        error: error.into(),
        retry_at_ms,
    };
    assert_eq!(claim_id(jobs, T0, 5).await, Some(id));
    assert!(
        jobs.finish_job(id, "node-a", T0 + 1, &fail("boom", T0 + 10_000))
            .await
            .unwrap()
    );
    let queued = jobs.get_job(id).await.unwrap().unwrap();
    assert_eq!(queued.status, JobStatus::Queued);
    assert_eq!(queued.not_before_ms, T0 + 10_000);
    assert_eq!(queued.error.as_deref(), Some("boom"));
    assert_eq!((queued.lease_owner, queued.lease_until_ms), (None, None));
    assert_eq!(queued.finished_at_ms, None);
    assert_eq!(queued.attempts, 1);
    // Still queued: no duplicate meanwhile.
    assert_eq!(
        jobs.enqueue_job(&new_job(wh, table, "compact", 1))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        claim_id(jobs, T0 + 9_999, 5).await,
        None,
        "not before the retry time"
    );
    let retried = claim(jobs, "node-a", T0 + 10_000, 5).await.unwrap();
    assert_eq!((retried.id, retried.attempts), (id, 2));
    assert_eq!(
        retried.error.as_deref(),
        Some("boom"),
        "the last error stays"
    );
    assert!(
        jobs.finish_job(id, "node-a", T0 + 10_001, &fail("boom again", T0 + 20_000))
            .await
            .unwrap()
    );
    let failed = jobs.get_job(id).await.unwrap().unwrap();
    assert_eq!(failed.status, JobStatus::Failed);
    assert_eq!(failed.error.as_deref(), Some("boom again"));
    assert_eq!(failed.finished_at_ms, Some(T0 + 10_001));
    assert_eq!(failed.lease_owner, None);
    assert_eq!(drain(jobs).await, 0, "failed for good");
    assert!(!succeed(jobs, id, "node-a", T0 + 10_002).await);
    // A failed job is history: the table can be queued again.
    let next = enqueue(jobs, new_job(wh, table, "compact", 1)).await;
    assert_ne!(next, id);
    assert_eq!(drain(jobs).await, 1);
}

async fn jobs_listing(jobs: &Arc<dyn JobStore>) {
    assert_eq!(drain(jobs).await, 0);
    let (wh, t1, t2) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let j1 = enqueue(jobs, new_job(wh, t1, "compact", 1)).await;
    let j2 = enqueue(jobs, new_job(wh, t1, "expire-snapshots", 1)).await;
    let j3 = enqueue(jobs, new_job(wh, t2, "compact", 0)).await;
    assert_eq!(claim_id(jobs, T0, 5).await, Some(j1));
    let list = |filter: JobFilter| async move {
        jobs.list_jobs(&filter)
            .await
            .unwrap()
            .into_iter()
            .map(|j| j.id)
            .collect::<Vec<_>>()
    };
    let in_wh = || JobFilter {
        warehouse_id: Some(wh),
        ..JobFilter::default()
    };
    assert_eq!(list(in_wh()).await, vec![j3, j2, j1], "newest first");
    let all = list(JobFilter::default()).await;
    assert!(all.len() > 3, "other warehouses' jobs too");
    assert_eq!(all[..3], [j3, j2, j1]);
    assert_eq!(
        list(JobFilter {
            table_id: Some(t1),
            ..JobFilter::default()
        })
        .await,
        vec![j2, j1]
    );
    assert_eq!(
        list(JobFilter {
            kind: Some("compact".into()),
            ..in_wh()
        })
        .await,
        vec![j3, j1]
    );
    assert_eq!(
        list(JobFilter {
            status: Some(JobStatus::Running),
            ..in_wh()
        })
        .await,
        vec![j1]
    );
    assert_eq!(
        list(JobFilter {
            status: Some(JobStatus::Queued),
            kind: Some("compact".into()),
            ..in_wh()
        })
        .await,
        vec![j3]
    );
    assert_eq!(
        list(JobFilter {
            limit: 2,
            ..in_wh()
        })
        .await,
        vec![j3, j2]
    );
    assert!(
        list(JobFilter {
            warehouse_id: Some(Uuid::now_v7()),
            ..JobFilter::default()
        })
        .await
        .is_empty()
    );
    assert!(succeed(jobs, j1, "node-a", T0 + 1).await);
    assert_eq!(drain(jobs).await, 2);
}

async fn jobs_policies(store: &Arc<dyn CatalogStore>, jobs: &Arc<dyn JobStore>) {
    let sorted = |mut policies: Vec<(Uuid, serde_json::Value)>| {
        policies.sort_by_key(|(id, _)| *id);
        policies
    };
    let (wh, s1, s2, unset) = (
        Uuid::now_v7(),
        Uuid::now_v7(),
        Uuid::now_v7(),
        Uuid::now_v7(),
    );
    let p1 = serde_json::json!({ "compact": { "enabled": true } });
    let p2 = serde_json::json!({ "expire-snapshots": { "max-age-ms": 5 } });
    jobs.set_policy(s1, wh, Some(&p1)).await.unwrap();
    jobs.set_policy(s2, wh, Some(&p2)).await.unwrap();
    assert_eq!(
        sorted(jobs.get_policies(&[s2, unset, s1]).await.unwrap()),
        vec![(s1, p1.clone()), (s2, p2.clone())]
    );
    assert!(jobs.get_policies(&[]).await.unwrap().is_empty());
    assert!(jobs.get_policies(&[unset]).await.unwrap().is_empty());
    let p3 = serde_json::json!({ "compact": { "enabled": false } });
    jobs.set_policy(s1, wh, Some(&p3)).await.unwrap();
    assert_eq!(
        sorted(jobs.get_policies(&[s1, s2]).await.unwrap()),
        vec![(s1, p3.clone()), (s2, p2.clone())]
    );
    jobs.set_policy(s1, wh, None).await.unwrap();
    assert_eq!(
        jobs.get_policies(&[s1, s2]).await.unwrap(),
        vec![(s2, p2.clone())]
    );
    jobs.set_policy(s1, wh, None).await.unwrap();

    // Dropping a table or namespace removes its policy; the table's jobs stay as history.
    let w = warehouse(store, "wh_jobs").await;
    let ns_id = Uuid::now_v7();
    store
        .create_namespace(&NamespaceRecord {
            id: ns_id,
            warehouse_id: w.id,
            ident: ns(&["p"]),
            properties: HashMap::new(),
        })
        .await
        .unwrap();
    let t = tabular(w.id, &["p"], "t", TabularKind::Table);
    store.create_tabular(&t).await.unwrap();
    let other = tabular(w.id, &["p"], "other", TabularKind::Table);
    store.create_tabular(&other).await.unwrap();
    for scope in [w.id, ns_id, t.id, other.id] {
        jobs.set_policy(scope, w.id, Some(&p1)).await.unwrap();
    }
    let job = enqueue(jobs, new_job(w.id, t.id, "compact", 1)).await;
    let scopes = [w.id, ns_id, t.id, other.id];
    let with_policy = |policies: Vec<(Uuid, serde_json::Value)>| {
        let mut ids: Vec<Uuid> = policies.into_iter().map(|(id, _)| id).collect();
        ids.sort();
        ids
    };
    assert!(
        !store
            .drop_tabular_at(t.id, "file:///elsewhere", &[])
            .await
            .unwrap()
    );
    assert_eq!(
        with_policy(jobs.get_policies(&scopes).await.unwrap()),
        vec![w.id, ns_id, t.id, other.id],
        "a failed drop keeps the policy"
    );
    assert!(store.drop_tabular(t.id, &[]).await.unwrap());
    assert_eq!(
        with_policy(jobs.get_policies(&scopes).await.unwrap()),
        vec![w.id, ns_id, other.id]
    );
    assert!(jobs.get_job(job).await.unwrap().is_some());
    assert!(
        store
            .drop_tabular_at(other.id, &other.metadata_location, &[])
            .await
            .unwrap()
    );
    assert_eq!(
        with_policy(jobs.get_policies(&scopes).await.unwrap()),
        vec![w.id, ns_id]
    );
    store.drop_namespace(w.id, &ns(&["p"]), &[]).await.unwrap();
    assert_eq!(
        with_policy(jobs.get_policies(&scopes).await.unwrap()),
        vec![w.id]
    );
    assert_eq!(drain(jobs).await, 1);
}
