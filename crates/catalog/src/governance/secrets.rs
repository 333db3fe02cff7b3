//! Client secrets: generated with 256 bits of entropy, stored only as salted SHA-256 hashes.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// A fresh random secret (43 URL-safe characters).
pub fn generate_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A fresh client id: a readable prefix and 64 random bits.
pub fn generate_client_id(prefix: &str) -> String {
    let mut bytes = [0u8; 8];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}-{}", hex::encode(bytes))
}

/// `(salt, hash)` of a secret, both hex.
pub fn hash_secret(secret: &str) -> (String, String) {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = hex::encode(salt);
    let hash = digest(&salt, secret);
    (salt, hash)
}

fn digest(salt: &str, secret: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(salt.as_bytes());
    hasher.update([0u8]);
    hasher.update(secret.as_bytes());
    hex::encode(hasher.finalize())
}

/// Compares in constant time with respect to the secret.
pub fn verify_secret(secret: &str, salt: &str, hash: &str) -> bool {
    let candidate = digest(salt, secret);
    candidate.len() == hash.len()
        && candidate
            .bytes()
            .zip(hash.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_salted_and_verify() {
        let secret = generate_secret();
        assert_eq!(secret.len(), 43);
        let (salt1, hash1) = hash_secret(&secret);
        let (salt2, hash2) = hash_secret(&secret);
        assert_ne!(hash1, hash2, "salted");
        assert!(verify_secret(&secret, &salt1, &hash1));
        assert!(verify_secret(&secret, &salt2, &hash2));
        assert!(!verify_secret("wrong", &salt1, &hash1));
        assert!(!hash1.contains(&secret));
        assert!(generate_client_id("svc").starts_with("svc-"));
    }
}
