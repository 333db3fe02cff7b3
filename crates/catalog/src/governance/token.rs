//! Access tokens: compact JWTs signed with HMAC-SHA256 under a key id, so signing keys can be
//! rotated while tokens signed with the previous key stay valid until they expire.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Claims of a Floe access token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    /// The principal id.
    pub sub: String,
    pub iat: i64,
    pub exp: i64,
    pub jti: String,
    /// When the principal last presented its credentials (seconds); token exchange keeps it,
    /// so a chain of exchanges cannot outlive the session limit.
    #[serde(default)]
    pub auth_time: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    alg: String,
    typ: String,
    kid: String,
}

/// Why a token was refused. The text is safe to show to the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is malformed")]
    Malformed,
    #[error("the token is signed with an unknown key")]
    UnknownKey,
    #[error("the token signature is invalid")]
    BadSignature,
    #[error("the token has expired")]
    Expired,
}

pub fn sign(claims: &Claims, kid: &str, key: &[u8]) -> String {
    let header = Header {
        alg: "HS256".into(),
        typ: "JWT".into(),
        kid: kid.into(),
    };
    let header = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).expect("header serializes"));
    let claims = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims serialize"));
    let signing_input = format!("{header}.{claims}");
    let signature = URL_SAFE_NO_PAD.encode(mac(key, signing_input.as_bytes()));
    format!("{signing_input}.{signature}")
}

fn mac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// The key id a token claims to be signed with, read before the signature is checked.
pub fn key_id(token: &str) -> Result<String, TokenError> {
    let header = token.split('.').next().ok_or(TokenError::Malformed)?;
    let bytes = URL_SAFE_NO_PAD
        .decode(header)
        .map_err(|_| TokenError::Malformed)?;
    let header: Header = serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)?;
    if header.alg != "HS256" {
        return Err(TokenError::Malformed);
    }
    Ok(header.kid)
}

/// The claims of a token, unverified: only for tokens already authenticated.
pub fn peek_claims(token: &str) -> Option<Claims> {
    let claims = token.split('.').nth(1)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()
}

/// Checks the signature with `key` and the expiry against `now` (seconds).
pub fn verify(token: &str, key: &[u8], now: i64) -> Result<Claims, TokenError> {
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| TokenError::Malformed)?;
    let mut check = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    check.update(header.as_bytes());
    check.update(b".");
    check.update(claims.as_bytes());
    check
        .verify_slice(&signature)
        .map_err(|_| TokenError::BadSignature)?;
    let bytes = URL_SAFE_NO_PAD
        .decode(claims)
        .map_err(|_| TokenError::Malformed)?;
    let claims: Claims = serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)?;
    if claims.exp <= now {
        return Err(TokenError::Expired);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(exp: i64) -> Claims {
        Claims {
            iss: "floe".into(),
            sub: "p1".into(),
            iat: 0,
            exp,
            jti: "j".into(),
            auth_time: 0,
        }
    }

    #[test]
    fn round_trip_and_rejections() {
        let token = sign(&claims(100), "k1", b"secret");
        assert_eq!(key_id(&token).unwrap(), "k1");
        assert_eq!(verify(&token, b"secret", 50).unwrap(), claims(100));
        assert_eq!(verify(&token, b"other", 50), Err(TokenError::BadSignature));
        assert_eq!(verify(&token, b"secret", 100), Err(TokenError::Expired));
        let mut tampered = token.clone();
        tampered.insert(token.find('.').unwrap() + 2, 'x');
        assert!(verify(&tampered, b"secret", 50).is_err());
        for junk in ["", "a.b", "a.b.c.d", "...", "x.y.z"] {
            assert!(verify(junk, b"secret", 0).is_err(), "{junk}");
            let _ = key_id(junk);
        }
    }

    #[test]
    fn arbitrary_input_never_panics() {
        let mut seed = 7u64;
        for _ in 0..5000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = (seed % 80) as usize;
            let s: String = (0..len)
                .map(|i| {
                    let c = ((seed >> (i % 56)) & 0x7f) as u8;
                    if c.is_ascii_graphic() { c as char } else { '.' }
                })
                .collect();
            let _ = key_id(&s);
            let _ = verify(&s, b"k", 0);
        }
    }

    /// Valid tokens with one to three random edits (a character replaced, deleted, inserted
    /// or a segment repeated), 100,000 of them: none panics, and any that still verifies
    /// carries exactly the original claims.
    #[test]
    fn edited_tokens_never_panic_or_forge_claims() {
        let original = claims(1_000);
        let token = sign(&original, "k1", b"secret");
        let alphabet: Vec<char> = "ABCabc019-_=.+/ \u{e9}\u{0}".chars().collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..100_000 {
            let mut chars: Vec<char> = token.chars().collect();
            for _ in 0..1 + next() % 3 {
                let at = next() as usize % (chars.len() + 1);
                let c = alphabet[next() as usize % alphabet.len()];
                match next() % 4 {
                    0 if at < chars.len() => chars[at] = c,
                    1 if at < chars.len() => {
                        chars.remove(at);
                    }
                    2 => chars.insert(at, c),
                    _ => {
                        let segment: Vec<char> = chars[at..].iter().take(8).copied().collect();
                        chars.splice(at..at, segment);
                    }
                }
            }
            let edited: String = chars.into_iter().collect();
            let _ = key_id(&edited);
            if let Ok(verified) = verify(&edited, b"secret", 0) {
                assert_eq!(verified, original, "{edited} verified with other claims");
            }
        }
    }
}
