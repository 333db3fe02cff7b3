//! Tokens from an external OpenID Connect issuer: RS256 JWTs checked against the issuer's
//! published keys (JWKS), its issuer and audience, and their validity period.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use floe_catalog::governance::auth::ExternalTokenVerifier;
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::signature::Verifier;
use rsa::{BigUint, RsaPublicKey};
use serde_json::Value;
use sha2::Sha256;

/// Settings of the external issuer.
#[derive(Debug, Clone)]
pub struct OidcConfig {
    /// The issuer URL; `<issuer>/.well-known/openid-configuration` names its key set.
    pub issuer: String,
    /// The audience tokens must carry.
    pub audience: String,
    /// The claim whose value is the Floe principal name (default `sub`).
    pub principal_claim: String,
}

#[derive(Debug)]
pub struct OidcVerifier {
    config: OidcConfig,
    jwks_uri: String,
    /// Where a browser signs in (authorization code flow), if the issuer names it.
    authorization_endpoint: Option<String>,
    /// Where a browser trades its code for tokens, if the issuer names it.
    token_endpoint: Option<String>,
    http: reqwest::Client,
    keys: RwLock<(HashMap<String, RsaPublicKey>, Option<Instant>)>,
}

impl OidcVerifier {
    /// Discovers the issuer's key set and loads it.
    pub async fn discover(config: OidcConfig) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?;
        let url = format!(
            "{}/.well-known/openid-configuration",
            config.issuer.trim_end_matches('/')
        );
        let discovery: Value = http
            .get(&url)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("fetch {url}: {e}"))?
            .json()
            .await
            .map_err(|e| format!("{url} is not JSON: {e}"))?;
        let jwks_uri = discovery["jwks_uri"]
            .as_str()
            .ok_or_else(|| format!("{url} has no jwks_uri"))?
            .to_string();
        let endpoint = |name: &str| discovery[name].as_str().map(str::to_string);
        let verifier = OidcVerifier {
            config,
            jwks_uri,
            authorization_endpoint: endpoint("authorization_endpoint"),
            token_endpoint: endpoint("token_endpoint"),
            http,
            keys: RwLock::new((HashMap::new(), None)),
        };
        verifier.refresh_keys().await?;
        Ok(verifier)
    }

    /// The issuer's browser sign-in endpoints (authorization, token), when it publishes both.
    pub fn browser_endpoints(&self) -> Option<(String, String)> {
        Some((
            self.authorization_endpoint.clone()?,
            self.token_endpoint.clone()?,
        ))
    }

    /// The issuer URL tokens must name.
    pub fn issuer(&self) -> &str {
        &self.config.issuer
    }

    async fn refresh_keys(&self) -> Result<(), String> {
        let jwks: Value = self
            .http
            .get(&self.jwks_uri)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("fetch {}: {e}", self.jwks_uri))?
            .json()
            .await
            .map_err(|e| format!("{} is not JSON: {e}", self.jwks_uri))?;
        let mut keys = HashMap::new();
        for key in jwks["keys"].as_array().into_iter().flatten() {
            if key["kty"] != "RSA" {
                continue;
            }
            let (Some(kid), Some(n), Some(e)) =
                (key["kid"].as_str(), key["n"].as_str(), key["e"].as_str())
            else {
                continue;
            };
            let (Ok(n), Ok(e)) = (URL_SAFE_NO_PAD.decode(n), URL_SAFE_NO_PAD.decode(e)) else {
                continue;
            };
            if let Ok(public) =
                RsaPublicKey::new(BigUint::from_bytes_be(&n), BigUint::from_bytes_be(&e))
            {
                keys.insert(kid.to_string(), public);
            }
        }
        *self.keys.write().expect("jwks lock") = (keys, Some(Instant::now()));
        Ok(())
    }

    fn key(&self, kid: &str) -> Option<RsaPublicKey> {
        self.keys.read().expect("jwks lock").0.get(kid).cloned()
    }

    /// Refetches the key set for an unknown key id, at most every 30 seconds.
    async fn key_refreshing(&self, kid: &str) -> Option<RsaPublicKey> {
        if let Some(key) = self.key(kid) {
            return Some(key);
        }
        let recent = self
            .keys
            .read()
            .expect("jwks lock")
            .1
            .is_some_and(|at| at.elapsed() < Duration::from_secs(30));
        if !recent && let Err(e) = self.refresh_keys().await {
            tracing::warn!(error = %e, "refresh OIDC keys");
        }
        self.key(kid)
    }
}

fn decode_part(part: &str) -> Result<Value, String> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| "the token is malformed".to_string())?;
    serde_json::from_slice(&bytes).map_err(|_| "the token is malformed".to_string())
}

#[async_trait]
impl ExternalTokenVerifier for OidcVerifier {
    async fn verify(&self, token: &str) -> Result<String, String> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("the token is malformed".into());
        };
        let head = decode_part(header)?;
        if head["alg"] != "RS256" {
            return Err("the token must be signed with RS256".into());
        }
        let kid = head["kid"].as_str().ok_or("the token names no key")?;
        let key = self
            .key_refreshing(kid)
            .await
            .ok_or("the token is signed with an unknown key")?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| "the token is malformed")?;
        let signature = Signature::try_from(signature.as_slice())
            .map_err(|_| "the token signature is invalid")?;
        VerifyingKey::<Sha256>::new(key)
            .verify(format!("{header}.{payload}").as_bytes(), &signature)
            .map_err(|_| "the token signature is invalid")?;
        let claims = decode_part(payload)?;
        if claims["iss"].as_str() != Some(self.config.issuer.as_str()) {
            return Err("the token is from another issuer".into());
        }
        let audience_ok = match &claims["aud"] {
            Value::String(aud) => *aud == self.config.audience,
            Value::Array(auds) => auds
                .iter()
                .any(|a| a.as_str() == Some(self.config.audience.as_str())),
            _ => false,
        };
        if !audience_ok {
            return Err("the token is for another audience".into());
        }
        let now = chrono::Utc::now().timestamp();
        if claims["exp"].as_i64().is_none_or(|exp| exp <= now) {
            return Err("the access token has expired".into());
        }
        if claims["nbf"].as_i64().is_some_and(|nbf| nbf > now + 60) {
            return Err("the token is not valid yet".into());
        }
        claims[self.config.principal_claim.as_str()]
            .as_str()
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .ok_or_else(|| format!("the token has no {} claim", self.config.principal_claim))
    }
}
