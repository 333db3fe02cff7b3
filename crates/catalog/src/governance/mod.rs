//! Governance: who is calling (authentication) — principals, client credentials, access
//! tokens and their signing keys.

pub mod audit;
pub mod auth;
pub mod authz;
pub mod policies;
pub mod secrets;
pub mod token;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrincipalKind {
    User,
    Service,
}

impl PrincipalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PrincipalKind::User => "user",
            PrincipalKind::Service => "service",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(PrincipalKind::User),
            "service" => Some(PrincipalKind::Service),
            _ => None,
        }
    }
}

/// A user or service that authenticates to Floe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Principal {
    pub id: Uuid,
    pub name: String,
    pub kind: PrincipalKind,
    pub client_id: String,
    /// The bootstrap principal: every privilege everywhere.
    pub is_root: bool,
    pub disabled: bool,
    pub created_at_ms: i64,
}

/// A principal with its stored credential hash.
#[derive(Debug, Clone)]
pub struct PrincipalCredentials {
    pub principal: Principal,
    pub secret_salt: String,
    pub secret_hash: String,
}

/// An HMAC key that signs access tokens.
#[derive(Clone)]
pub struct SigningKey {
    pub kid: String,
    pub secret: Vec<u8>,
    pub created_at_ms: i64,
    pub retired_at_ms: Option<i64>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("created_at_ms", &self.created_at_ms)
            .field("retired_at_ms", &self.retired_at_ms)
            .finish_non_exhaustive()
    }
}

/// Storage of principals and signing keys. Implemented by `floe-store`.
#[async_trait]
pub trait GovernanceStore: Send + Sync + std::fmt::Debug {
    /// Inserts a principal; `AlreadyExists` when the name or client id is taken.
    async fn create_principal(&self, principal: &PrincipalCredentials) -> Result<()>;
    async fn get_principal(&self, id: Uuid) -> Result<Option<Principal>>;
    async fn get_principal_by_name(&self, name: &str) -> Result<Option<Principal>>;
    async fn get_credentials_by_client_id(
        &self,
        client_id: &str,
    ) -> Result<Option<PrincipalCredentials>>;
    async fn list_principals(&self) -> Result<Vec<Principal>>;
    async fn root_principal(&self) -> Result<Option<Principal>>;
    /// Replaces a principal's client id and secret hash.
    async fn set_credentials(
        &self,
        id: Uuid,
        client_id: &str,
        secret_salt: &str,
        secret_hash: &str,
    ) -> Result<bool>;
    async fn set_disabled(&self, id: Uuid, disabled: bool) -> Result<bool>;

    async fn list_signing_keys(&self) -> Result<Vec<SigningKey>>;
    async fn insert_signing_key(&self, key: &SigningKey) -> Result<()>;
    async fn retire_signing_keys_before(&self, kid: &str, at_ms: i64) -> Result<u64>;
}
