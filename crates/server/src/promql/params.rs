//! A request's parameters as Prometheus reads them: the URL's query and, for a POST, its
//! form body (`application/x-www-form-urlencoded`) together; times as RFC 3339 or Unix
//! seconds, durations as Prometheus durations (`5m`, `1h30m`) or seconds.

use axum::http::{HeaderMap, header};

use super::{Fail, bad_data};

pub(super) struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    pub fn of(query: Option<&str>, headers: &HeaderMap, body: &[u8]) -> Result<Params, Fail> {
        let mut pairs: Vec<(String, String)> = match query {
            Some(q) => serde_urlencoded::from_str(q)
                .map_err(|e| bad_data(format!("invalid query string: {e}")))?,
            None => Vec::new(),
        };
        let form = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if form && !body.is_empty() {
            let more: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
                .map_err(|e| bad_data(format!("invalid form body: {e}")))?;
            pairs.extend(more);
        }
        Ok(Params { pairs })
    }

    /// The first value of a parameter (Go's `FormValue`: the body's before the URL's).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    pub fn all(&self, name: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// `limit` (0 or absent: none).
    pub fn limit(&self) -> Result<usize, Fail> {
        match self.get("limit") {
            None => Ok(usize::MAX),
            Some(v) => match v.parse::<i64>() {
                Ok(0) => Ok(usize::MAX),
                Ok(n) if n > 0 => Ok(n as usize),
                _ => Err(bad_data(format!(
                    "invalid parameter \"limit\": cannot parse {v:?} to a non-negative integer"
                ))),
            },
        }
    }

    /// A time in milliseconds: Unix seconds (with a fraction) or RFC 3339.
    pub fn time(&self, name: &str) -> Result<Option<i64>, Fail> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        parse_time(v).map(Some).ok_or_else(|| {
            bad_data(format!(
                "invalid parameter {name:?}: cannot parse {v:?} to a valid timestamp"
            ))
        })
    }

    /// A duration in milliseconds: seconds (with a fraction) or a Prometheus duration.
    pub fn duration(&self, name: &str) -> Result<Option<i64>, Fail> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        parse_duration(v).map(Some).ok_or_else(|| {
            bad_data(format!(
                "invalid parameter {name:?}: cannot parse {v:?} to a valid duration"
            ))
        })
    }
}

pub(super) fn parse_time(v: &str) -> Option<i64> {
    let ms = match v.parse::<f64>() {
        Ok(secs) if secs.is_finite() => (secs * 1000.0).round(),
        Ok(_) => return None,
        Err(_) => chrono::DateTime::parse_from_rfc3339(v)
            .ok()?
            .timestamp_millis() as f64,
    };
    // Within the span the evaluator's arithmetic is safe in (see floe_promql::MAX_MILLIS).
    (ms.abs() <= floe_promql::MAX_MILLIS as f64).then_some(ms as i64)
}

pub(super) fn parse_duration(v: &str) -> Option<i64> {
    let ms = match v.parse::<f64>() {
        Ok(secs) if secs.is_finite() => (secs * 1000.0).round() as i64,
        Ok(_) => return None,
        Err(_) => floe_promql::testscript::parse_duration(v)?,
    };
    (ms.abs() <= floe_promql::MAX_MILLIS).then_some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_durations() {
        assert_eq!(parse_time("1435781451.781"), Some(1_435_781_451_781));
        assert_eq!(
            parse_time("2015-07-01T20:10:51.781Z"),
            Some(1_435_781_451_781)
        );
        assert_eq!(parse_time("soon"), None);
        assert_eq!(parse_time("NaN"), None);
        assert_eq!(parse_duration("15s"), Some(15_000));
        assert_eq!(parse_duration("1h30m"), Some(5_400_000));
        assert_eq!(parse_duration("0.5"), Some(500));
        assert_eq!(parse_duration("5x"), None);
        assert_eq!(parse_time("1e300"), None);
        assert_eq!(parse_time("-9e15"), None);
        assert_eq!(parse_duration("100000000y"), None);
    }
}
