//! Validation of user-supplied names.

use iceberg::NamespaceIdent;

use crate::{CatalogError, Result};

/// Longest name part Floe accepts, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Deepest namespace nesting Floe accepts.
pub const MAX_NAMESPACE_DEPTH: usize = 16;

/// Checks one name part (a namespace level, a table or view name).
pub fn validate_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(CatalogError::bad_request(format!(
            "{what} name must not be empty"
        )));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(CatalogError::bad_request(format!(
            "{what} name is {} bytes long; the limit is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(CatalogError::bad_request(format!(
            "{what} name {name:?} contains the control character U+{:04X}",
            c as u32
        )));
    }
    Ok(())
}

pub fn validate_namespace(ns: &NamespaceIdent) -> Result<()> {
    if ns.len() > MAX_NAMESPACE_DEPTH {
        return Err(CatalogError::bad_request(format!(
            "namespace has {} levels; the limit is {MAX_NAMESPACE_DEPTH}",
            ns.len()
        )));
    }
    for part in ns.iter() {
        validate_name("namespace", part)?;
        // `t:` marks tables and views in authorization scopes; a namespace level must not
        // look like one.
        if part.starts_with("t:") {
            return Err(CatalogError::bad_request(format!(
                "namespace level {part:?} must not start with 't:'"
            )));
        }
    }
    Ok(())
}

/// Joins namespace levels into the key the store keeps (levels separated by 0x1F).
pub fn namespace_key(ns: &NamespaceIdent) -> String {
    ns.iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("\u{1f}")
}

/// The store key of a namespace's parent ("" for a top-level namespace).
pub fn parent_key(ns: &NamespaceIdent) -> String {
    ns.parent().map(|p| namespace_key(&p)).unwrap_or_default()
}

pub fn namespace_from_key(key: &str) -> NamespaceIdent {
    NamespaceIdent::from_vec(key.split('\u{1f}').map(str::to_string).collect())
        .expect("stored namespace keys are never empty")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(validate_name("table", "orders").is_ok());
        assert!(validate_name("table", "with space/and.dot").is_ok());
        assert!(validate_name("table", "").is_err());
        assert!(
            validate_name("table", "a\u{1f}b")
                .unwrap_err()
                .to_string()
                .contains("U+001F")
        );
        assert!(validate_name("table", &"x".repeat(256)).is_err());
    }

    #[test]
    fn namespace_levels_cannot_look_like_table_scopes() {
        assert!(validate_namespace(&NamespaceIdent::from_strs(["a", "t:x"]).unwrap()).is_err());
        assert!(validate_namespace(&NamespaceIdent::from_strs(["a", "tx"]).unwrap()).is_ok());
    }

    #[test]
    fn namespace_keys_round_trip() {
        let ns = NamespaceIdent::from_strs(["a", "b", "c"]).unwrap();
        assert_eq!(namespace_from_key(&namespace_key(&ns)), ns);
        assert_eq!(parent_key(&ns), "a\u{1f}b");
        assert_eq!(parent_key(&NamespaceIdent::new("a".into())), "");
    }
}
