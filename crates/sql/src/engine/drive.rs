//! Running a query to its end on the engine's runtime and handing its batches to the front
//! door that asked: one attempt, planned again when it runs out of memory in a hash join or
//! loses workers before it answers, its answer held for the client in memory and, past that,
//! in the warehouse's object storage ([`super::results`]).

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::DataFusionError;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use futures::{FutureExt, StreamExt};
use object_store::ObjectStore;

use super::{SqlEngine, SqlError, admission, results, without_hash_joins};

/// What a query may be run again with.
pub(super) struct Reruns {
    /// The query's session and plan: if it runs out of memory before its first batch, it is
    /// planned again without hash joins and run once more.
    pub(super) retry: Option<(SessionState, LogicalPlan)>,
    /// For a distributed query: run again without the workers it lost if it fails before
    /// its first batch.
    pub(super) relaunch: Option<crate::distributed::Relaunch>,
    /// For a distributed query: where its stages' figures are found once it has answered
    /// (they go to `/metrics`).
    pub(super) planned: Option<Arc<crate::distributed::PlannedStages>>,
    /// The physical plan that runs, logged with a task's panic.
    pub(super) plan: Arc<dyn datafusion::physical_plan::ExecutionPlan>,
}

impl SqlEngine {
    /// Polls `stream` on the query runtime to its end and hands its batches over, in memory
    /// and past that through `spool` (the statement's warehouse store), while the consumer
    /// reads; when the consumer goes away (a client disconnects), the query stops and what
    /// it left is deleted. The query gives back its place in line as soon as it has run;
    /// its answer is kept for the consumer until the statement's deadline.
    pub(super) fn drive(
        &self,
        schema: SchemaRef,
        mut stream: SendableRecordBatchStream,
        ticket: admission::Ticket,
        mut reruns: Reruns,
        spool: Option<Arc<dyn ObjectStore>>,
    ) -> SendableRecordBatchStream {
        let (mut producer, consumer) = results::channel(schema.clone(), self.config.results, spool);
        let plain = schema.clone();
        self.cpu.handle().spawn(async move {
            let deadline = ticket.deadline;
            let mut answered = false;
            let failure = loop {
                // An operator polled on this task (not one of DataFusion's own) that panics
                // unwinds to here: the statement ends with an internal error, never a hang.
                let next = deadline.run(std::panic::AssertUnwindSafe(stream.next()).catch_unwind());
                // A distributed attempt is watched while it runs: a worker that stops without
                // failing ends it.
                let polled = match reruns.relaunch.as_mut() {
                    None => next.await,
                    Some(relaunch) => {
                        let step = tokio::select! {
                            biased;
                            next = next => Step::Polled(next),
                            lost = relaunch.stalled() => Step::Stalled(lost),
                        };
                        match step {
                            Step::Polled(polled) => polled,
                            Step::Stalled(lost) if answered => {
                                break Some(relaunch.stalled_after_answering(lost));
                            }
                            // The stalled attempt's tasks stop before the next starts.
                            Step::Stalled(lost) => match restart(
                                &mut stream,
                                &plain,
                                &deadline,
                                relaunch.after_stall(lost),
                            )
                            .await
                            {
                                Ok(()) => continue,
                                Err(e) => break Some(e),
                            },
                        }
                    }
                };
                let batch = match polled {
                    Ok(Ok(Some(batch))) => batch,
                    Ok(Ok(None)) => {
                        if let Some(planned) = &reruns.planned {
                            planned.record_finished();
                        }
                        break None;
                    }
                    Ok(Err(panic)) => {
                        let cause = panic_message(panic.as_ref());
                        let plan = datafusion::physical_plan::displayable(reruns.plan.as_ref())
                            .indent(true)
                            .to_string();
                        let internal = SqlError::internal(&cause, Some(&plan));
                        break Some(DataFusionError::External(Box::new(internal)));
                    }
                    // The query stops here (its stream is dropped); the consumer hears why.
                    Err(expired) => break Some(DataFusionError::External(Box::new(expired))),
                };
                if let Err(e) = &batch
                    && !answered
                    && matches!(e.find_root(), DataFusionError::ResourcesExhausted(_))
                    && let Some((state, plan)) = reruns.retry.take()
                {
                    tracing::warn!(
                        "a query ran out of its memory in a hash join; running it again with \
                         sort-merge joins, which spill"
                    );
                    // The first attempt's memory goes back to the pool before the second.
                    let again = without_hash_joins(state, plan);
                    match restart(&mut stream, &plain, &deadline, again).await {
                        Ok(()) => continue,
                        Err(e) => break Some(e),
                    }
                }
                let batch = match (batch, reruns.relaunch.as_mut()) {
                    (Err(e), Some(relaunch))
                        if !answered
                            && !matches!(e.find_root(), DataFusionError::ResourcesExhausted(_)) =>
                    {
                        // The failed attempt's tasks stop before the next starts.
                        match restart(&mut stream, &plain, &deadline, relaunch.after(e)).await {
                            Ok(()) => continue,
                            Err(e) => break Some(e),
                        }
                    }
                    (batch, _) => batch,
                };
                answered = true;
                // A task that panicked is a fault of the engine's: the client gets an error
                // id, the log the cause and the plan.
                let batch = batch.map_err(|e| {
                    if super::is_panic(&e) {
                        let plan = datafusion::physical_plan::displayable(reruns.plan.as_ref())
                            .indent(true)
                            .to_string();
                        DataFusionError::External(Box::new(SqlError::internal(&e, Some(&plan))))
                    } else {
                        e
                    }
                });
                let batch = match batch.and_then(|b| crate::cast_batch(&b, &plain)) {
                    Ok(batch) => batch,
                    Err(e) => break Some(e),
                };
                // A consumer that stops reading (with no room left to hold its answer)
                // holds the query only until the deadline.
                match deadline.run(producer.push(batch)).await {
                    Ok(Ok(true)) => {}
                    // The consumer went away: no one to tell.
                    Ok(Ok(false)) => break None,
                    Ok(Err(e)) => break Some(e),
                    Err(expired) => break Some(DataFusionError::External(Box::new(expired))),
                }
            };
            drop(stream);
            // The query has run: its place in line goes to the next one (before the
            // consumer hears the end), while its answer waits for the consumer until the
            // deadline.
            let unread = producer.finish_releasing(failure, ticket).await;
            if let Err(expired) = deadline.run(unread.read()).await {
                unread.expire(DataFusionError::External(Box::new(expired)));
            }
        });
        let reading = futures::stream::unfold(consumer, |mut consumer| async move {
            consumer.next().await.map(|item| (item, consumer))
        });
        Box::pin(RecordBatchStreamAdapter::new(schema, reading))
    }
}

/// What waiting on a query's next batch came to.
enum Step<T> {
    Polled(T),
    /// Workers of its distributed attempt were found lost while no batch came.
    Stalled(Vec<url::Url>),
}

/// What a query task's panic said, for the log.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    format!("a query task panicked: {}", crate::panic_said(panic))
}

/// `stream` dropped (its memory and tasks go before the next attempt starts) and replaced by
/// the one `again` starts within `deadline`; the error to report when it does not.
async fn restart(
    stream: &mut SendableRecordBatchStream,
    schema: &SchemaRef,
    deadline: &admission::Deadline,
    again: impl std::future::Future<Output = datafusion::common::Result<SendableRecordBatchStream>>,
) -> datafusion::common::Result<()> {
    drop(std::mem::replace(
        stream,
        Box::pin(RecordBatchStreamAdapter::new(
            schema.clone(),
            futures::stream::empty(),
        )),
    ));
    *stream = deadline
        .run(again)
        .await
        .unwrap_or_else(|expired| Err(DataFusionError::External(Box::new(expired))))?;
    Ok(())
}
