//! A series' label set: sorted by name, shared between the steps of an evaluation (cloning
//! is a reference count), with the hashing and matching PromQL's grouping and vector matching
//! need.

use std::fmt;
use std::sync::Arc;

/// The label naming a series' metric.
pub const METRIC_NAME: &str = "__name__";

/// A label set, sorted by name, no empty values (PromQL treats an empty value as absent).
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels(Arc<Vec<(String, String)>>);

impl Labels {
    /// Labels from pairs in any order; empty values are dropped, a repeated name keeps the last.
    pub fn new(mut pairs: Vec<(String, String)>) -> Self {
        pairs.retain(|(_, v)| !v.is_empty());
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                std::mem::swap(later, earlier);
                true
            } else {
                false
            }
        });
        Labels(Arc::new(pairs))
    }

    pub fn empty() -> Self {
        Labels::default()
    }

    pub fn get(&self, name: &str) -> &str {
        match self.0.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            Ok(i) => &self.0[i].1,
            Err(_) => "",
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn name(&self) -> &str {
        self.get(METRIC_NAME)
    }

    /// A copy with `name` set to `value` (removed when `value` is empty).
    pub fn with(&self, name: &str, value: &str) -> Labels {
        let mut pairs: Vec<(String, String)> =
            self.0.iter().filter(|(n, _)| n != name).cloned().collect();
        if !value.is_empty() {
            pairs.push((name.to_string(), value.to_string()));
        }
        Labels::new(pairs)
    }

    /// A copy without the named labels.
    pub fn without(&self, names: &[String]) -> Labels {
        if !self.0.iter().any(|(n, _)| names.contains(n)) {
            return self.clone();
        }
        Labels(Arc::new(
            self.0
                .iter()
                .filter(|(n, _)| !names.contains(n))
                .cloned()
                .collect(),
        ))
    }

    /// A copy with only the named labels.
    pub fn keep(&self, names: &[String]) -> Labels {
        Labels(Arc::new(
            self.0
                .iter()
                .filter(|(n, _)| names.contains(n))
                .cloned()
                .collect(),
        ))
    }

    pub fn without_name(&self) -> Labels {
        if self.get(METRIC_NAME).is_empty() {
            return self.clone();
        }
        self.without(&[METRIC_NAME.to_string()])
    }

    /// Prometheus's hash of a label set (xxHash64 of `name 0xff value 0xff …`): `limit_ratio`
    /// samples series by it, so the same series are chosen as Prometheus chooses.
    pub fn prometheus_hash(&self) -> u64 {
        let mut bytes = Vec::new();
        for (n, v) in self.0.iter() {
            bytes.extend_from_slice(n.as_bytes());
            bytes.push(0xff);
            bytes.extend_from_slice(v.as_bytes());
            bytes.push(0xff);
        }
        twox_hash::XxHash64::oneshot(0, &bytes)
    }

    /// The key vector matching and grouping compare: the named labels (`on`/`by`), or all but
    /// them and the metric name (`ignoring`/`without`). Unambiguous: names and values are
    /// separated by bytes no label holds (0xff is not UTF-8).
    pub fn signature(&self, names: &[String], on: bool) -> Vec<u8> {
        let mut key = Vec::new();
        for (n, v) in self.0.iter() {
            let listed = names.contains(n);
            let included = if on {
                listed
            } else {
                !listed && n != METRIC_NAME
            };
            if included {
                key.extend_from_slice(n.as_bytes());
                key.push(0xfe);
                key.extend_from_slice(v.as_bytes());
                key.push(0xff);
            }
        }
        key
    }
}

impl fmt::Display for Labels {
    /// As Prometheus prints a label set: `{a="1", b="2"}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (n, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{n}={v:?}")?;
        }
        f.write_str("}")
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
