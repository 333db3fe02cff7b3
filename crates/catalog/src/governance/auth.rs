//! Authentication: client credentials in, short-lived signed access tokens out, and tokens
//! back to principals on every request.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rand::RngCore;
use uuid::Uuid;

use super::secrets::{generate_client_id, generate_secret, hash_secret, verify_secret};
use super::token::{self, Claims, TokenError};
use super::{GovernanceStore, Principal, PrincipalCredentials, PrincipalKind, SigningKey};
use crate::ident::validate_name;
use crate::{CatalogError, Result};

pub const ISSUER: &str = "floe";
/// Client ids of principals created for external identities start with this.
const OIDC_CLIENT_PREFIX: &str = "oidc-";

/// Name and client id of the bootstrap principal.
pub const ROOT_NAME: &str = "root";

/// Client credentials, as written to `root-credentials.json` and returned once on creation.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct ClientCredentials {
    pub client_id: String,
    pub client_secret: String,
}

/// Shows the client id only: a secret must never reach a log through `{:?}`.
impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .finish()
    }
}

/// A freshly issued access token.
#[derive(Clone)]
pub struct IssuedToken {
    pub access_token: String,
    pub expires_in: i64,
}

impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedToken")
            .field("access_token", &"<redacted>")
            .field("expires_in", &self.expires_in)
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct AuthConfig {
    pub token_ttl: Duration,
    /// How long a chain of token exchanges may extend a session begun with credentials.
    pub max_session: Duration,
    /// How long a principal looked up for a request is trusted before the store is asked
    /// again (bounds how long a disabled principal's tokens keep working).
    pub principal_cache_ttl: Duration,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            token_ttl: Duration::from_secs(3600),
            max_session: Duration::from_secs(12 * 3600),
            principal_cache_ttl: Duration::from_secs(2),
        }
    }
}

/// Verifies tokens from an external identity provider (OpenID Connect) and names the Floe
/// principal they stand for.
#[async_trait::async_trait]
pub trait ExternalTokenVerifier: Send + Sync + std::fmt::Debug {
    /// The principal name the token maps to, or why it is refused (safe to show).
    async fn verify(&self, token: &str) -> std::result::Result<String, String>;
}

/// Issues and checks tokens. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct AuthService {
    store: Arc<dyn GovernanceStore>,
    config: AuthConfig,
    external: Option<Arc<dyn ExternalTokenVerifier>>,
    keys: RwLock<Vec<SigningKey>>,
    principals: RwLock<HashMap<Uuid, (Principal, Instant)>>,
}

fn unauthenticated(message: impl Into<String>) -> CatalogError {
    CatalogError::Unauthenticated(message.into())
}

fn now_secs() -> i64 {
    chrono::Utc::now().timestamp()
}

impl AuthService {
    pub fn new(store: Arc<dyn GovernanceStore>, config: AuthConfig) -> Self {
        Self {
            store,
            config,
            external: None,
            keys: RwLock::new(Vec::new()),
            principals: RwLock::new(HashMap::new()),
        }
    }

    /// Also accepts tokens that `verifier` vouches for.
    pub fn with_external(mut self, verifier: Arc<dyn ExternalTokenVerifier>) -> Self {
        self.external = Some(verifier);
        self
    }

    pub fn store(&self) -> &Arc<dyn GovernanceStore> {
        &self.store
    }

    pub fn token_ttl(&self) -> Duration {
        self.config.token_ttl
    }

    /// Loads signing keys, creating the first one on a new store.
    pub async fn init(&self) -> Result<()> {
        if self.store.list_signing_keys().await?.is_empty() {
            self.insert_new_key().await?;
        }
        self.reload_keys().await
    }

    async fn insert_new_key(&self) -> Result<SigningKey> {
        let mut secret = vec![0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        let key = SigningKey {
            kid: Uuid::now_v7().simple().to_string(),
            secret,
            created_at_ms: crate::clock::now_ms(),
            retired_at_ms: None,
        };
        self.store.insert_signing_key(&key).await?;
        Ok(key)
    }

    async fn reload_keys(&self) -> Result<()> {
        let keys = self.store.list_signing_keys().await?;
        *self.keys.write().expect("key lock") = keys;
        Ok(())
    }

    /// Starts signing with a new key. Tokens signed with older keys stay valid until they
    /// expire: a key is retired only once it stopped signing (a newer key took over) more
    /// than one token lifetime ago.
    pub async fn rotate_signing_key(&self) -> Result<String> {
        let key = self.insert_new_key().await?;
        let keys = self.store.list_signing_keys().await?;
        let cutoff = key.created_at_ms - self.config.token_ttl.as_millis() as i64;
        if let Some(before) = retirement_cutoff(&keys, cutoff) {
            self.store
                .retire_signing_keys_before(&key.kid, before)
                .await?;
        }
        self.reload_keys().await?;
        Ok(key.kid)
    }

    fn signing_key(&self) -> Result<SigningKey> {
        self.keys
            .read()
            .expect("key lock")
            .iter()
            .filter(|k| k.retired_at_ms.is_none())
            .max_by_key(|k| k.created_at_ms)
            .cloned()
            .ok_or_else(|| CatalogError::Unavailable("no signing key is available".into()))
    }

    async fn verification_key(&self, kid: &str) -> Result<Option<SigningKey>> {
        let find = |keys: &[SigningKey]| {
            keys.iter()
                .find(|k| k.kid == kid && k.retired_at_ms.is_none())
                .cloned()
        };
        if let Some(key) = find(&self.keys.read().expect("key lock")) {
            return Ok(Some(key));
        }
        // Another node may have rotated: look again in the store.
        self.reload_keys().await?;
        Ok(find(&self.keys.read().expect("key lock")))
    }

    /// Signs a token for `principal`, whose session began at `auth_time`; tokens never reach
    /// past `auth_time` + the session limit.
    fn sign_for(&self, principal: &Principal, auth_time: i64) -> Result<IssuedToken> {
        let key = self.signing_key()?;
        let now = now_secs();
        let session_end = auth_time + self.config.max_session.as_secs() as i64;
        let exp = (now + self.config.token_ttl.as_secs() as i64).min(session_end);
        if exp <= now {
            return Err(unauthenticated(
                "the session has reached its maximum lifetime; authenticate with credentials again",
            ));
        }
        let claims = Claims {
            iss: ISSUER.into(),
            sub: principal.id.to_string(),
            iat: now,
            exp,
            jti: Uuid::new_v4().simple().to_string(),
            auth_time,
        };
        Ok(IssuedToken {
            access_token: token::sign(&claims, &key.kid, &key.secret),
            expires_in: exp - now,
        })
    }

    /// OAuth2 client credentials grant.
    pub async fn token_for_client(
        &self,
        client_id: &str,
        client_secret: &str,
    ) -> Result<IssuedToken> {
        let credentials = self.store.get_credentials_by_client_id(client_id).await?;
        let Some(credentials) = credentials else {
            return Err(unauthenticated("invalid client credentials"));
        };
        if !verify_secret(
            client_secret,
            &credentials.secret_salt,
            &credentials.secret_hash,
        ) {
            return Err(unauthenticated("invalid client credentials"));
        }
        if credentials.principal.disabled {
            return Err(unauthenticated("the principal is disabled"));
        }
        self.sign_for(&credentials.principal, now_secs())
    }

    /// OAuth2 token exchange: a valid token buys a fresh one for the same principal.
    pub async fn exchange(&self, subject_token: &str) -> Result<IssuedToken> {
        let principal = self.authenticate(subject_token).await?;
        // Floe's own tokens carry when their session began; others (OIDC) begin one now but
        // only live as long as Floe's token lifetime allows.
        let auth_time = token::key_id(subject_token)
            .ok()
            .and_then(|_| token::peek_claims(subject_token))
            .map(|c| if c.auth_time > 0 { c.auth_time } else { c.iat })
            .unwrap_or_else(now_secs);
        self.sign_for(&principal, auth_time)
    }

    /// The principal a bearer token stands for.
    pub async fn authenticate(&self, bearer: &str) -> Result<Principal> {
        let kid = match (token::key_id(bearer), &self.external) {
            (Ok(kid), _) => kid,
            (Err(_), Some(external)) => {
                return self.authenticate_external(external.as_ref(), bearer).await;
            }
            (Err(e), None) => return Err(unauthenticated(format!("invalid access token: {e}"))),
        };
        let key = self.verification_key(&kid).await?.ok_or_else(|| {
            unauthenticated(format!("invalid access token: {}", TokenError::UnknownKey))
        })?;
        let claims = token::verify(bearer, &key.secret, now_secs()).map_err(|e| match e {
            TokenError::Expired => unauthenticated("the access token has expired"),
            other => unauthenticated(format!("invalid access token: {other}")),
        })?;
        let id = Uuid::parse_str(&claims.sub)
            .map_err(|_| unauthenticated("invalid access token subject"))?;
        self.recheck(id).await
    }

    /// The principal `id` as a session it signed in to sees it now: refused once it is
    /// disabled or deleted (on other nodes within the principal cache's window, 2 s).
    /// Front doors that keep a session open (the PostgreSQL wire) call it per statement.
    pub async fn recheck(&self, id: Uuid) -> Result<Principal> {
        let principal = self
            .principal(id)
            .await?
            .ok_or_else(|| unauthenticated("the principal no longer exists"))?;
        if principal.disabled {
            return Err(unauthenticated("the principal is disabled"));
        }
        Ok(principal)
    }

    /// How long a session begun with client credentials may last.
    pub fn max_session(&self) -> Duration {
        self.config.max_session
    }

    /// A token from the external issuer: its principal claim names a Floe principal, created
    /// (as a user without grants or usable client credentials) the first time it is seen.
    async fn authenticate_external(
        &self,
        external: &dyn ExternalTokenVerifier,
        bearer: &str,
    ) -> Result<Principal> {
        let name = external
            .verify(bearer)
            .await
            .map_err(|reason| unauthenticated(format!("invalid access token: {reason}")))?;
        let principal = match self.store.get_principal_by_name(&name).await? {
            // Only principals made for external identities: never root or a service principal.
            Some(principal) if principal.client_id.starts_with(OIDC_CLIENT_PREFIX) => principal,
            Some(_) => {
                return Err(unauthenticated(format!(
                    "the external identity {name:?} collides with a local principal"
                )));
            }
            None => {
                validate_name("principal", &name)?;
                let (salt, hash) = hash_secret(&generate_secret());
                let principal = Principal {
                    id: Uuid::now_v7(),
                    name: name.clone(),
                    kind: PrincipalKind::User,
                    client_id: generate_client_id(OIDC_CLIENT_PREFIX.trim_end_matches('-')),
                    is_root: false,
                    disabled: false,
                    created_at_ms: crate::clock::now_ms(),
                };
                match self
                    .store
                    .create_principal(&PrincipalCredentials {
                        principal: principal.clone(),
                        secret_salt: salt,
                        secret_hash: hash,
                    })
                    .await
                {
                    Ok(()) => principal,
                    Err(CatalogError::AlreadyExists { .. }) => self
                        .store
                        .get_principal_by_name(&name)
                        .await?
                        .ok_or_else(|| unauthenticated("the principal vanished"))?,
                    Err(e) => return Err(e),
                }
            }
        };
        if principal.disabled {
            return Err(unauthenticated("the principal is disabled"));
        }
        Ok(principal)
    }

    async fn principal(&self, id: Uuid) -> Result<Option<Principal>> {
        if let Some((principal, at)) = self.principals.read().expect("principal cache").get(&id)
            && at.elapsed() < self.config.principal_cache_ttl
        {
            return Ok(Some(principal.clone()));
        }
        let principal = self.store.get_principal(id).await?;
        let mut cache = self.principals.write().expect("principal cache");
        match &principal {
            Some(p) => {
                cache.insert(id, (p.clone(), Instant::now()));
            }
            None => {
                cache.remove(&id);
            }
        }
        Ok(principal)
    }

    fn forget(&self, id: Uuid) {
        self.principals
            .write()
            .expect("principal cache")
            .remove(&id);
    }

    /// Makes sure the root principal exists. With `configured` credentials (from the
    /// environment) root gets exactly those; otherwise a new root gets generated ones, which
    /// are returned so the caller can hand them to the operator.
    pub async fn bootstrap_root(
        &self,
        configured: Option<ClientCredentials>,
    ) -> Result<Option<ClientCredentials>> {
        let existing = self.store.root_principal().await?;
        match (existing, configured) {
            (Some(root), Some(wanted)) => {
                let current = self
                    .store
                    .get_credentials_by_client_id(&wanted.client_id)
                    .await?;
                let matches = current.as_ref().is_some_and(|c| {
                    c.principal.id == root.id
                        && verify_secret(&wanted.client_secret, &c.secret_salt, &c.secret_hash)
                });
                if !matches {
                    let (salt, hash) = hash_secret(&wanted.client_secret);
                    self.store
                        .set_credentials(root.id, &wanted.client_id, &salt, &hash)
                        .await?;
                    self.forget(root.id);
                }
                Ok(None)
            }
            (Some(_), None) => Ok(None),
            (None, configured) => {
                let generated = configured.is_none();
                let credentials = configured.unwrap_or_else(|| ClientCredentials {
                    client_id: ROOT_NAME.to_string(),
                    client_secret: generate_secret(),
                });
                let (salt, hash) = hash_secret(&credentials.client_secret);
                let record = PrincipalCredentials {
                    principal: Principal {
                        id: Uuid::now_v7(),
                        name: ROOT_NAME.to_string(),
                        kind: PrincipalKind::User,
                        client_id: credentials.client_id.clone(),
                        is_root: true,
                        disabled: false,
                        created_at_ms: crate::clock::now_ms(),
                    },
                    secret_salt: salt,
                    secret_hash: hash,
                };
                match self.store.create_principal(&record).await {
                    Ok(()) => Ok(generated.then_some(credentials)),
                    // Another node bootstrapped at the same moment.
                    Err(CatalogError::AlreadyExists { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Creates a principal and returns its credentials; the secret is shown only this once.
    pub async fn create_principal(
        &self,
        name: &str,
        kind: PrincipalKind,
    ) -> Result<(Principal, ClientCredentials)> {
        validate_name("principal", name)?;
        let credentials = ClientCredentials {
            client_id: generate_client_id(kind.as_str()),
            client_secret: generate_secret(),
        };
        let (salt, hash) = hash_secret(&credentials.client_secret);
        let principal = Principal {
            id: Uuid::now_v7(),
            name: name.to_string(),
            kind,
            client_id: credentials.client_id.clone(),
            is_root: false,
            disabled: false,
            created_at_ms: crate::clock::now_ms(),
        };
        self.store
            .create_principal(&PrincipalCredentials {
                principal: principal.clone(),
                secret_salt: salt,
                secret_hash: hash,
            })
            .await?;
        Ok((principal, credentials))
    }

    /// Replaces a principal's secret (its client id stays); old tokens stay valid until expiry.
    pub async fn rotate_credentials(&self, id: Uuid) -> Result<ClientCredentials> {
        let principal = self
            .store
            .get_principal(id)
            .await?
            .ok_or_else(|| not_found_principal(id))?;
        let secret = generate_secret();
        let (salt, hash) = hash_secret(&secret);
        self.store
            .set_credentials(id, &principal.client_id, &salt, &hash)
            .await?;
        self.forget(id);
        Ok(ClientCredentials {
            client_id: principal.client_id,
            client_secret: secret,
        })
    }

    /// Disables or re-enables a principal: a disabled one gets no tokens and its tokens stop
    /// working within the principal cache lifetime.
    pub async fn set_disabled(&self, id: Uuid, disabled: bool) -> Result<()> {
        let principal = self
            .store
            .get_principal(id)
            .await?
            .ok_or_else(|| not_found_principal(id))?;
        if principal.is_root && disabled {
            return Err(CatalogError::bad_request(
                "the root principal cannot be disabled",
            ));
        }
        self.store.set_disabled(id, disabled).await?;
        self.forget(id);
        Ok(())
    }
}

pub fn not_found_principal(id: impl std::fmt::Display) -> CatalogError {
    CatalogError::NotFound {
        error_type: "NoSuchPrincipalException",
        message: format!("Principal does not exist: {id}"),
    }
}
/// Keys created before the returned time stopped signing more than a token lifetime ago
/// (`stopped_by`): each one's successor was created by then. The newest key created before
/// `stopped_by` signed until its successor came, later than that, so it stays; every older
/// key goes.
fn retirement_cutoff(keys: &[SigningKey], stopped_by: i64) -> Option<i64> {
    keys.iter()
        .filter(|k| k.retired_at_ms.is_none() && k.created_at_ms < stopped_by)
        .map(|k| k.created_at_ms)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(kid: &str, created_at_ms: i64) -> SigningKey {
        SigningKey {
            kid: kid.into(),
            secret: Vec::new(),
            created_at_ms,
            retired_at_ms: None,
        }
    }

    #[test]
    fn a_key_is_retired_only_a_token_lifetime_after_it_stopped_signing() {
        let hour = 3_600_000;
        let now = 100 * hour;
        // The only key, two days old, signed until this rotation: it stays.
        let keys = [key("a", now - 48 * hour), key("b", now)];
        // (Keys created before the cutoff are retired: none.)
        assert_eq!(retirement_cutoff(&keys, now - hour), Some(now - 48 * hour));
        // Two hours later: "a" stopped when "b" came, two hours ago — it goes; "b" stays.
        let later = now + 2 * hour;
        let keys = [key("a", now - 48 * hour), key("b", now), key("c", later)];
        assert_eq!(retirement_cutoff(&keys, later - hour), Some(now));
        // Rotating again within the hour keeps every key that signed within it.
        let soon = now + hour / 2;
        let keys = [key("a", now - 48 * hour), key("b", now), key("c", soon)];
        assert_eq!(retirement_cutoff(&keys, soon - hour), Some(now - 48 * hour));
    }
}
