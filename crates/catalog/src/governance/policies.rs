//! Row and column policies: a role's read of one table narrowed to the rows a filter keeps,
//! with some columns hidden, nulled, hashed or replaced by an expression.
//!
//! A policy belongs to a role and a table. Policies only ever take away: every policy of
//! every role a principal holds on a table applies to it at once (their row filters all
//! hold; a column masked by two gets the stricter mask), and a principal can lift none by
//! holding another role. The root principal and Floe's own background work hold no role and
//! read unrestricted.
//!
//! The catalog keeps and enforces the policy's parts it can judge: the columns are Iceberg
//! field ids (a rename cannot unmask a column), and a principal under a policy for a table
//! is never handed the table's raw files (vended credentials, remote signing, scan planning:
//! see [`crate::service::CatalogService::refuse_raw_reads`]). Floe's SQL engine applies the
//! filter and the masks in every plan it makes over the table.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// How a masked column reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mask", rename_all = "kebab-case")]
pub enum Mask {
    /// The column is not there at all.
    Hide,
    /// Every value reads NULL.
    Null,
    /// Values read as the hex SHA-256 of their text (NULL stays NULL): equal values stay
    /// equal, so joins and counts of distinct values still work. Not secret for values a
    /// guesser can enumerate (a hash of a 9-digit number is found by trying them all).
    Hash,
    /// Values read as a SQL expression over the table's columns, cast to the column's type.
    Expression { expression: String },
}

impl Mask {
    /// How strict the mask is: of two masks on one column, the stricter applies. A hash and
    /// an expression rank alike: neither is known to hide what the other shows (`'***'`
    /// hides more than a hash, `upper(x)` less), so two different ones read NULL.
    fn strictness(&self) -> u8 {
        match self {
            Mask::Hide => 3,
            Mask::Null => 2,
            Mask::Hash | Mask::Expression { .. } => 0,
        }
    }
}

/// A mask on one column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ColumnMask {
    /// The column's Iceberg field id (top-level columns only).
    pub field_id: i32,
    /// Its name when the policy was set, for people reading the policy.
    pub column: String,
    #[serde(flatten)]
    pub mask: Mask,
}

/// One role's policy on one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct DataPolicy {
    pub role: String,
    /// The table's id.
    pub table_id: String,
    /// The scope of the table (its securable path), for listing by warehouse.
    #[serde(skip)]
    pub scope: String,
    /// A SQL predicate over the table's columns: only rows for which it is true are read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_filter: Option<String>,
    #[serde(default)]
    pub masks: Vec<ColumnMask>,
    pub created_at_ms: i64,
}

/// What applies to one principal reading one table: every policy of its roles combined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedPolicy {
    /// The roles whose policies these are, sorted.
    pub roles: Vec<String>,
    /// The row filters, all of which must hold.
    pub row_filters: Vec<String>,
    /// The mask of each masked column, by field id.
    pub masks: BTreeMap<i32, Mask>,
    /// For each column whose mask is an expression, the masks of each policy that gave it
    /// that expression. The expression reads the table's raw columns, as its policy meant it
    /// to; where another policy masks a column it reads more strictly than that policy does,
    /// it would show what the other policy hides, and reads NULL instead (Floe's SQL decides,
    /// as only it knows which columns an expression reads).
    pub expression_origins: BTreeMap<i32, Vec<BTreeMap<i32, Mask>>>,
}

impl AppliedPolicy {
    /// The combination of `policies` (none when there are none).
    pub fn combine(policies: &[Arc<DataPolicy>]) -> Option<AppliedPolicy> {
        if policies.is_empty() {
            return None;
        }
        let mut roles: Vec<String> = policies.iter().map(|p| p.role.clone()).collect();
        roles.sort();
        roles.dedup();
        let mut row_filters: Vec<String> = policies
            .iter()
            .filter_map(|p| p.row_filter.clone())
            .collect();
        row_filters.sort();
        row_filters.dedup();
        let mut masks: BTreeMap<i32, Mask> = BTreeMap::new();
        for mask in policies.iter().flat_map(|p| &p.masks) {
            let stricter = match masks.get(&mask.field_id) {
                None => mask.mask.clone(),
                Some(held) if held.strictness() > mask.mask.strictness() => held.clone(),
                Some(held) if mask.mask.strictness() > held.strictness() => mask.mask.clone(),
                // Two different expressions, or a hash and an expression: neither is known to
                // hide what the other shows.
                Some(held) if *held != mask.mask => Mask::Null,
                Some(held) => held.clone(),
            };
            masks.insert(mask.field_id, stricter);
        }
        let mut expression_origins: BTreeMap<i32, Vec<BTreeMap<i32, Mask>>> = BTreeMap::new();
        for (&field_id, mask) in &masks {
            if !matches!(mask, Mask::Expression { .. }) {
                continue;
            }
            let origins = policies
                .iter()
                .filter(|p| {
                    p.masks
                        .iter()
                        .any(|m| m.field_id == field_id && m.mask == *mask)
                })
                .map(|p| {
                    p.masks
                        .iter()
                        .map(|m| (m.field_id, m.mask.clone()))
                        .collect()
                })
                .collect();
            expression_origins.insert(field_id, origins);
        }
        Some(AppliedPolicy {
            roles,
            row_filters,
            masks,
            expression_origins,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(role: &str, filter: Option<&str>, masks: &[(i32, Mask)]) -> Arc<DataPolicy> {
        Arc::new(DataPolicy {
            role: role.into(),
            table_id: "t".into(),
            scope: String::new(),
            row_filter: filter.map(str::to_string),
            masks: masks
                .iter()
                .map(|(id, mask)| ColumnMask {
                    field_id: *id,
                    column: format!("c{id}"),
                    mask: mask.clone(),
                })
                .collect(),
            created_at_ms: 0,
        })
    }

    #[test]
    fn policies_combine_to_the_strictest() {
        assert_eq!(AppliedPolicy::combine(&[]), None);
        let expression = |e: &str| Mask::Expression {
            expression: e.into(),
        };
        let applied = AppliedPolicy::combine(&[
            policy(
                "b",
                Some("region = 'EU'"),
                &[(1, Mask::Hash), (2, expression("x"))],
            ),
            policy(
                "a",
                Some("year > 2020"),
                &[(1, Mask::Null), (3, expression("y"))],
            ),
            policy(
                "c",
                None,
                &[(2, expression("z")), (3, expression("y")), (4, Mask::Hash)],
            ),
            policy("d", None, &[(4, expression("'***'")), (5, Mask::Hash)]),
            policy("e", None, &[(5, Mask::Hash)]),
        ])
        .unwrap();
        assert_eq!(applied.roles, ["a", "b", "c", "d", "e"]);
        assert_eq!(applied.row_filters, ["region = 'EU'", "year > 2020"]);
        assert_eq!(applied.masks[&1], Mask::Null);
        // Two different expressions on one column: the value is nulled.
        assert_eq!(applied.masks[&2], Mask::Null);
        assert_eq!(applied.masks[&3], expression("y"));
        // A hash and an expression: nulled too; two hashes stay a hash.
        assert_eq!(applied.masks[&4], Mask::Null);
        assert_eq!(applied.masks[&5], Mask::Hash);
        // Column 3's expression came from policies a and c, each with its own masks.
        assert_eq!(applied.expression_origins[&3].len(), 2);
        assert_eq!(applied.expression_origins[&3][0][&1], Mask::Null);
        assert!(!applied.expression_origins[&3][1].contains_key(&1));
        assert!(!applied.expression_origins.contains_key(&2));
    }

    #[test]
    fn masks_read_and_write_as_the_api_spells_them() {
        let mask: ColumnMask = serde_json::from_value(serde_json::json!({
            "field-id": 4, "column": "email", "mask": "expression", "expression": "'***'"
        }))
        .unwrap();
        assert_eq!(
            mask.mask,
            Mask::Expression {
                expression: "'***'".into()
            }
        );
        let hidden: ColumnMask = serde_json::from_value(serde_json::json!({
            "field-id": 2, "column": "ssn", "mask": "hide"
        }))
        .unwrap();
        assert_eq!(
            serde_json::to_value(&hidden).unwrap()["mask"],
            serde_json::json!("hide")
        );
    }
}
