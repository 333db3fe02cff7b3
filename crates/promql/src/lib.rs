//! Floe's PromQL: Prometheus's query language over the samples Floe keeps in `otel.metrics`.
//!
//! A query is parsed with `promql-parser` (GreptimeDB's parser), then every selector's series
//! are fetched from a [`Storage`] once — the server's storage plans them onto DataFusion over
//! the tenant's table, with the label matchers and the time range pushed into the scan — and
//! the expression is evaluated over them in memory with Prometheus's own semantics: the
//! 5-minute lookback and stale markers, `offset` and `@`, subquery step alignment, the
//! extrapolation of `rate`, vector matching, and Prometheus 3's delayed removal of the metric
//! name. Prometheus's own PromQL test files are the judge (`tests/promqltest.rs`).

mod aggregate;
mod annotations;
mod binary;
mod engine;
mod eval;
mod functions;
pub mod histogram;
pub mod labels;
mod quantile;
pub mod testscript;
pub mod value;

pub use engine::{
    Answer, Engine, Limits, MAX_MILLIS, Plan, QueryRange, Selected, parse_selector, selectors_of,
};
pub use eval::too_many_samples;
pub use functions::valid_label_name;
pub use labels::Labels;
pub use value::{Point, QueryValue, Sample, Series};

use async_trait::async_trait;

/// Why a query failed, by the error types of Prometheus's API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The query does not parse or is not valid PromQL (`bad_data`).
    #[error("{0}")]
    BadData(String),
    /// Evaluation failed (`execution`).
    #[error("{0}")]
    Execution(String),
    /// The storage could not answer (`internal`, or `unavailable` when retrying may help).
    #[error("{0}")]
    Storage(String),
    /// The caller may not read what the query selects (HTTP 403).
    #[error("{0}")]
    Denied(String),
    /// The query's deadline passed (`timeout`).
    #[error("query timed out in {0}")]
    Timeout(&'static str),
}

impl Error {
    /// The `errorType` of Prometheus's error answer.
    pub fn error_type(&self) -> &'static str {
        match self {
            Error::BadData(_) => "bad_data",
            Error::Execution(_) => "execution",
            Error::Storage(_) => "internal",
            Error::Denied(_) => "forbidden",
            Error::Timeout(_) => "timeout",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A label matcher of a selector: `=`, `!=`, `=~`, `!~` (regular expressions fully anchored,
/// as PromQL's are).
#[derive(Clone, Debug)]
pub struct Matcher {
    pub name: String,
    pub op: MatchOp,
    pub value: String,
}

#[derive(Clone, Debug)]
pub enum MatchOp {
    Equal,
    NotEqual,
    Regex(regex::Regex),
    NotRegex(regex::Regex),
}

impl Matcher {
    /// Whether a label's value (empty when absent) matches.
    pub fn matches(&self, value: &str) -> bool {
        match &self.op {
            MatchOp::Equal => self.value == value,
            MatchOp::NotEqual => self.value != value,
            MatchOp::Regex(r) => r.is_match(value),
            MatchOp::NotRegex(r) => !r.is_match(value),
        }
    }

    /// Whether a series with these labels is selected by this matcher.
    pub fn matches_labels(&self, labels: &Labels) -> bool {
        self.matches(labels.get(&self.name))
    }
}

/// One selector's read: its matchers and its time range (milliseconds, both inclusive).
#[derive(Clone, Copy, Debug)]
pub struct Want<'a> {
    pub matchers: &'a [Matcher],
    pub mint: i64,
    pub maxt: i64,
}

/// The series a selector names, with their samples between `mint` and `maxt` (milliseconds,
/// both inclusive), stale markers included; points in time order.
#[async_trait]
pub trait Storage: Send + Sync {
    async fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<Vec<Series>>;

    /// The series of several selectors, answered in their order. A storage that can serve
    /// several selectors from one read overrides it; by default each is selected in turn.
    async fn select_many(&self, wants: &[Want<'_>]) -> Result<Vec<Vec<Series>>> {
        let mut out = Vec::with_capacity(wants.len());
        for want in wants {
            out.push(self.select(want.matchers, want.mint, want.maxt).await?);
        }
        Ok(out)
    }
}
