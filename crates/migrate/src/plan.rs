//! The plan file: where tables come from, where they go, in which waves.
//!
//! ```toml
//! name = "hms-to-floe"            # the migration's name: its records in Floe go by it
//!
//! [source]
//! kind = "hive"                   # hive | jdbc | rest | directory
//! uri = "thrift://hms:9083"
//!
//! [target]
//! warehouse = "lake"
//! on-conflict = "fail"            # fail | skip | replace
//!
//! [mapping]                       # source database -> Floe namespace (dots nest)
//! sales = "finance.sales"
//!
//! [[waves]]
//! tables = ["sales.*"]            # `*` matches any run of characters
//! exclude = ["sales.tmp_*"]
//! sync = ["sales.orders"]         # kept in step with the source until cut-over
//! cut-over = true                 # `floe migrate cutover` may point the source at Floe
//! ```
//!
//! The same keys in YAML (`.yaml`/`.yml`) work too. A table belongs to the first wave that
//! names it; waves are numbered from 1 in file order.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Plan {
    pub name: String,
    pub source: SourceConfig,
    pub target: Target,
    #[serde(default)]
    pub mapping: BTreeMap<String, String>,
    pub waves: Vec<Wave>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    Hive,
    Jdbc,
    Rest,
    Directory,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct SourceConfig {
    pub kind: SourceKind,
    /// `thrift://host:port`, a database URL (`sqlite:…`, `postgres://…`), a REST catalog's
    /// base URI, or a directory (a path or `file:` URI).
    pub uri: String,
    /// JDBC: the catalog name in `iceberg_tables` (default `default`); REST: the warehouse.
    #[serde(default)]
    pub catalog: Option<String>,
    /// REST: the environment variable holding `client_id:client_secret` (never the secret
    /// itself in the plan).
    #[serde(default)]
    pub credential_env: Option<String>,
    /// REST: the environment variable holding a bearer token.
    #[serde(default)]
    pub token_env: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnConflict {
    /// A table of the same name in Floe stops that table's migration with an error.
    #[default]
    Fail,
    /// Leaves Floe's table as it is and records the source table as skipped.
    Skip,
    /// Replaces Floe's table (its files stay).
    Replace,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Target {
    pub warehouse: String,
    #[serde(default)]
    pub on_conflict: OnConflict,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Wave {
    pub tables: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub sync: Vec<String>,
    #[serde(default)]
    pub cut_over: bool,
}

impl Plan {
    /// Reads a plan from TOML, or YAML when the file ends in `.yaml`/`.yml`.
    pub fn load(path: &Path) -> anyhow::Result<Plan> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read plan {}", path.display()))?;
        let yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        let plan: Plan = if yaml {
            serde_yaml::from_str(&text)
                .with_context(|| format!("plan {} is not valid", path.display()))?
        } else {
            toml::from_str(&text)
                .with_context(|| format!("plan {} is not valid", path.display()))?
        };
        plan.validate()?;
        Ok(plan)
    }

    fn validate(&self) -> anyhow::Result<()> {
        if self.name.is_empty() || self.name.len() > 200 {
            bail!("plan: name must be 1 to 200 characters");
        }
        if self.waves.is_empty() {
            bail!("plan: no waves");
        }
        for (i, wave) in self.waves.iter().enumerate() {
            if wave.tables.is_empty() {
                bail!("plan: wave {} names no tables", i + 1);
            }
            for pattern in wave.tables.iter().chain(&wave.exclude).chain(&wave.sync) {
                if !pattern.contains('.') {
                    bail!(
                        "plan: wave {}: {pattern:?} must name database.table (globs allowed)",
                        i + 1
                    );
                }
            }
        }
        Ok(())
    }

    /// The wave (from 1) `table` (`database.table`) belongs to, if any.
    pub fn wave_of(&self, table: &str) -> Option<usize> {
        self.waves
            .iter()
            .position(|wave| {
                wave.tables.iter().any(|p| glob(p, table))
                    && !wave.exclude.iter().any(|p| glob(p, table))
            })
            .map(|i| i + 1)
    }

    /// Whether `table` is to be kept in sync until cut-over.
    pub fn syncs(&self, table: &str) -> bool {
        self.wave_of(table)
            .map(|w| self.waves[w - 1].sync.iter().any(|p| glob(p, table)))
            .unwrap_or(false)
    }

    pub fn wave(&self, number: usize) -> anyhow::Result<&Wave> {
        if number == 0 || number > self.waves.len() {
            bail!(
                "wave {number} is not in the plan (it has waves 1 to {})",
                self.waves.len()
            );
        }
        Ok(&self.waves[number - 1])
    }

    /// Floe's namespace for a source database.
    pub fn namespace_for(&self, database: &str) -> Vec<String> {
        let mapped = self
            .mapping
            .get(database)
            .map(String::as_str)
            .unwrap_or(database);
        mapped.split('.').map(str::to_string).collect()
    }
}

/// `uri` without a password: `scheme://user:secret@host` becomes `scheme://user:***@host`, and
/// `password=` / `secret=` query values `***` — for reports and records.
pub fn redacted(uri: &str) -> String {
    let mut out = uri.to_string();
    if let Some(start) = out.find("://").map(|i| i + 3) {
        let end = out[start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| start + i);
        if let Some(at) = out[start..end].rfind('@').map(|i| start + i)
            && let Some(colon) = out[start..at].find(':').map(|i| start + i)
        {
            out.replace_range(colon + 1..at, "***");
        }
    }
    if let Some(query) = out.find('?') {
        let (head, tail) = out.split_at(query + 1);
        let pairs: Vec<String> = tail
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _))
                    if k.to_ascii_lowercase().contains("password")
                        || k.to_ascii_lowercase().contains("secret") =>
                {
                    format!("{k}=***")
                }
                _ => pair.to_string(),
            })
            .collect();
        out = format!("{head}{}", pairs.join("&"));
    }
    out
}

/// `*` matches any run of characters (dots included); everything else matches itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let mut rest = text;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(after) = rest.strip_prefix(part) else {
                return false;
            };
            rest = after;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redacted("postgres://u:pw@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redacted("sqlite:/tmp/c.db"), "sqlite:/tmp/c.db");
        assert_eq!(
            redacted("postgres://h/db?password=x&a=b"),
            "postgres://h/db?password=***&a=b"
        );
    }

    #[test]
    fn globs_match_runs_of_characters() {
        assert!(glob("sales.*", "sales.orders"));
        assert!(glob("*.orders", "sales.orders"));
        assert!(glob("s*s.o*s", "sales.orders"));
        assert!(!glob("sales.*", "web.events"));
        assert!(glob("web.events", "web.events"));
        assert!(!glob("web.event", "web.events"));
    }

    #[test]
    fn tables_belong_to_their_first_wave() {
        let plan: Plan = toml::from_str(
            r#"
            name = "m"
            [source]
            kind = "directory"
            uri = "/data"
            [target]
            warehouse = "lake"
            [mapping]
            sales = "finance.sales"
            [[waves]]
            tables = ["sales.*"]
            exclude = ["sales.tmp_*"]
            sync = ["sales.orders"]
            [[waves]]
            tables = ["*.*"]
            "#,
        )
        .unwrap();
        plan.validate().unwrap();
        assert_eq!(plan.wave_of("sales.orders"), Some(1));
        assert_eq!(plan.wave_of("sales.tmp_x"), Some(2));
        assert!(plan.syncs("sales.orders"));
        assert!(!plan.syncs("sales.customers"));
        assert_eq!(plan.namespace_for("sales"), vec!["finance", "sales"]);
        assert_eq!(plan.namespace_for("web"), vec!["web"]);
        assert!(plan.wave(3).is_err());
    }

    #[test]
    fn yaml_plans_read_the_same_keys() {
        let plan: Plan = serde_yaml::from_str(
            "name: m\nsource: {kind: jdbc, uri: 'sqlite:/tmp/c.db'}\ntarget: {warehouse: lake, \
             on-conflict: skip}\nwaves:\n  - tables: ['db.*']\n    cut-over: true\n",
        )
        .unwrap();
        assert_eq!(plan.target.on_conflict, OnConflict::Skip);
        assert!(plan.waves[0].cut_over);
    }
}
