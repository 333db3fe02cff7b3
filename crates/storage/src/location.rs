//! Parsed storage locations (`file:///a/b`, `s3://bucket/key`).

use std::fmt;

use crate::{Result, StorageError};

/// A normalized absolute location: a scheme, an authority (bucket) and a path without a
/// trailing slash. `s3a://` and `s3n://` are read as `s3://`; a bare absolute path as `file://`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Location {
    scheme: String,
    authority: String,
    /// For `file`, the absolute path starting with `/`; for object stores, the key without a
    /// leading slash (may be empty for a bucket root).
    path: String,
}

impl Location {
    pub fn parse(raw: &str) -> Result<Self> {
        let invalid = |reason: &str| StorageError::InvalidLocation {
            location: raw.to_string(),
            reason: reason.to_string(),
        };
        if raw.is_empty() {
            return Err(invalid("it is empty"));
        }
        if raw.contains('\0') {
            return Err(invalid("it contains a NUL character"));
        }
        let (scheme, rest) = match raw.split_once("://") {
            Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
            None => match raw.strip_prefix("file:") {
                Some(rest) => ("file".to_string(), rest),
                None if raw.starts_with('/') => ("file".to_string(), raw),
                None => return Err(invalid("it is not an absolute URI or path")),
            },
        };
        let location = match scheme.as_str() {
            "file" => {
                if !rest.starts_with('/') {
                    return Err(invalid("a file location needs an absolute path"));
                }
                Location {
                    scheme,
                    authority: String::new(),
                    path: normalize_path(rest, true),
                }
            }
            "s3" | "s3a" | "s3n" => {
                let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(invalid("an s3 location needs a bucket"));
                }
                Location {
                    scheme: "s3".to_string(),
                    authority: bucket.to_string(),
                    path: normalize_path(key, false),
                }
            }
            other => return Err(invalid(&format!("the scheme '{other}' is not supported"))),
        };
        if location.path.split('/').any(|s| s == "..") {
            return Err(invalid("it contains '..'"));
        }
        Ok(location)
    }

    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    pub fn authority(&self) -> &str {
        &self.authority
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// This location with `segment` (which may contain `/`) appended.
    pub fn join(&self, segment: &str) -> Location {
        let segment = segment.trim_matches('/');
        let path = if self.path.is_empty() {
            segment.to_string()
        } else if segment.is_empty() {
            self.path.clone()
        } else if self.path == "/" {
            format!("/{segment}")
        } else {
            format!("{}/{segment}", self.path)
        };
        Location {
            scheme: self.scheme.clone(),
            authority: self.authority.clone(),
            path,
        }
    }

    /// The path of `self` below `root` (empty when they are equal), or `None` when `self`
    /// does not lie inside `root`.
    pub fn relative_to(&self, root: &Location) -> Option<&str> {
        if !self.is_within(root) {
            return None;
        }
        let rest = if root.path.is_empty() || root.path == "/" {
            self.path.as_str()
        } else {
            &self.path[root.path.len()..]
        };
        Some(rest.trim_start_matches('/'))
    }

    /// The first character of the path that object-store policies read as a pattern
    /// (`*`, `?`; `$` starts a policy variable), if any.
    pub fn pattern_character(&self) -> Option<char> {
        self.path.chars().find(|c| matches!(c, '*' | '?' | '$'))
    }

    /// True when `self` equals `root` or lies below it.
    pub fn is_within(&self, root: &Location) -> bool {
        if self.scheme != root.scheme || self.authority != root.authority {
            return false;
        }
        if root.path.is_empty() || root.path == "/" || self.path == root.path {
            return true;
        }
        self.path
            .strip_prefix(&root.path)
            .is_some_and(|rest| rest.starts_with('/'))
    }
}

fn normalize_path(path: &str, absolute: bool) -> String {
    let mut out = String::with_capacity(path.len());
    for segment in path.split('/').filter(|s| !s.is_empty() && *s != ".") {
        if absolute || !out.is_empty() {
            out.push('/');
        }
        out.push_str(segment);
    }
    if absolute && out.is_empty() {
        out.push('/');
    }
    out
}

impl TryFrom<String> for Location {
    type Error = StorageError;

    fn try_from(raw: String) -> Result<Self> {
        Location::parse(&raw)
    }
}

impl From<Location> for String {
    fn from(location: Location) -> String {
        location.to_string()
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scheme.as_str() {
            "file" => write!(f, "file://{}", self.path),
            _ if self.path.is_empty() => write!(f, "{}://{}", self.scheme, self.authority),
            _ => write!(f, "{}://{}/{}", self.scheme, self.authority, self.path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_normalizes() {
        let l = Location::parse("file:///tmp//wh/").unwrap();
        assert_eq!(l.to_string(), "file:///tmp/wh");
        assert_eq!(Location::parse("/tmp/wh").unwrap(), l);
        assert_eq!(Location::parse("file:/tmp/wh").unwrap(), l);
        let s = Location::parse("s3a://bucket/a/b/").unwrap();
        assert_eq!(s.to_string(), "s3://bucket/a/b");
        assert_eq!(
            Location::parse("s3://bucket").unwrap().to_string(),
            "s3://bucket"
        );
    }

    #[test]
    fn containment_respects_segment_boundaries() {
        let root = Location::parse("s3://b/wh").unwrap();
        assert!(Location::parse("s3://b/wh/t").unwrap().is_within(&root));
        assert!(Location::parse("s3://b/wh").unwrap().is_within(&root));
        assert!(!Location::parse("s3://b/wh2/t").unwrap().is_within(&root));
        assert!(!Location::parse("s3://c/wh/t").unwrap().is_within(&root));
        assert!(!Location::parse("file:///wh/t").unwrap().is_within(&root));
        let bucket = Location::parse("s3://b").unwrap();
        assert!(Location::parse("s3://b/x").unwrap().is_within(&bucket));
    }

    #[test]
    fn rejects_bad_locations() {
        for bad in ["", "relative/path", "gs://b/x", "s3:///x", "file:///a/../b"] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_spelling_of_a_location_is_one_location() {
        let canonical = Location::parse("file:///wh/finance").unwrap();
        for alias in [
            "file:///wh//finance",
            "file:///wh/./finance",
            "file:/wh/finance",
            "/wh/finance/",
            "file:////wh/finance",
            "FILE:///wh/finance",
        ] {
            let parsed = Location::parse(alias).unwrap();
            assert_eq!(parsed, canonical, "{alias}");
            assert_eq!(parsed.to_string(), canonical.to_string(), "{alias}");
        }
        assert_eq!(
            Location::parse("s3a://b/wh//t/").unwrap(),
            Location::parse("s3://b/wh/t").unwrap()
        );
    }

    #[test]
    fn relative_paths_and_pattern_characters() {
        let root = Location::parse("s3://b/wh").unwrap();
        let file = Location::parse("s3://b/wh/ns/t/data/1.parquet").unwrap();
        assert_eq!(file.relative_to(&root), Some("ns/t/data/1.parquet"));
        assert_eq!(root.relative_to(&root), Some(""));
        assert_eq!(
            Location::parse("s3://b/wh2/x").unwrap().relative_to(&root),
            None
        );
        let local = Location::parse("file:///").unwrap();
        assert_eq!(
            Location::parse("/a/b").unwrap().relative_to(&local),
            Some("a/b")
        );
        assert_eq!(file.pattern_character(), None);
        for (raw, c) in [
            ("s3://b/wh/t*", '*'),
            ("s3://b/w?h", '?'),
            ("s3://b/${aws:username}", '$'),
        ] {
            assert_eq!(Location::parse(raw).unwrap().pattern_character(), Some(c));
        }
    }

    #[test]
    fn joins_segments() {
        let root = Location::parse("file:///").unwrap();
        assert_eq!(root.join("a/b").to_string(), "file:///a/b");
        let s3 = Location::parse("s3://b").unwrap();
        assert_eq!(s3.join("/x/").to_string(), "s3://b/x");
    }
}
