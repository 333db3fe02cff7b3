//! AWS Signature Version 4, for STS calls and for remote signing of S3 requests.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The payload hash S3 accepts when the body is not part of the signature.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Percent-encodes per AWS rules: everything but unreserved characters.
pub fn aws_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What a request to sign looks like.
pub struct SignInput<'a> {
    pub method: &'a str,
    pub url: &'a reqwest::Url,
    /// Headers to sign (lower-case names); `host` is added from the URL.
    pub headers: Vec<(String, String)>,
    pub payload_hash: &'a str,
    pub region: &'a str,
    pub service: &'a str,
    pub access_key: &'a str,
    pub secret_key: &'a str,
    pub session_token: Option<&'a str>,
    pub now: chrono::DateTime<chrono::Utc>,
}

/// The headers to add to the request: `authorization`, `x-amz-date`, `x-amz-content-sha256`
/// (and `x-amz-security-token` with a session token).
pub fn sign(input: SignInput<'_>) -> Vec<(String, String)> {
    let amz_date = input.now.format("%Y%m%dT%H%M%SZ").to_string();
    let date = input.now.format("%Y%m%d").to_string();
    let host = match input.url.port() {
        Some(port) => format!("{}:{port}", input.url.host_str().unwrap_or_default()),
        None => input.url.host_str().unwrap_or_default().to_string(),
    };
    let mut added = vec![
        ("x-amz-date".to_string(), amz_date.clone()),
        (
            "x-amz-content-sha256".to_string(),
            input.payload_hash.to_string(),
        ),
    ];
    if let Some(token) = input.session_token {
        added.push(("x-amz-security-token".to_string(), token.to_string()));
    }
    let mut signed: Vec<(String, String)> = input
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
        .filter(|(k, _)| k != "authorization" && k != "host" && !added.iter().any(|(a, _)| a == k))
        .chain(added.iter().cloned())
        .chain(std::iter::once(("host".to_string(), host)))
        .collect();
    signed.sort();
    let canonical_headers: String = signed.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed_names = signed
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let mut query: Vec<(String, String)> = input
        .url
        .query_pairs()
        .map(|(k, v)| (aws_encode(&k), aws_encode(&v)))
        .collect();
    query.sort();
    let canonical_query = query
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let path = if input.url.path().is_empty() {
        "/"
    } else {
        input.url.path()
    };
    let canonical_request = format!(
        "{}\n{path}\n{canonical_query}\n{canonical_headers}\n{signed_names}\n{}",
        input.method, input.payload_hash
    );
    let scope = format!("{date}/{}/{}/aws4_request", input.region, input.service);
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        sha256_hex(canonical_request.as_bytes())
    );
    let k_date = hmac(format!("AWS4{}", input.secret_key).as_bytes(), &date);
    let k_region = hmac(&k_date, input.region);
    let k_service = hmac(&k_region, input.service);
    let k_signing = hmac(&k_service, "aws4_request");
    let signature = hex::encode(hmac(&k_signing, &string_to_sign));
    added.push((
        "authorization".to_string(),
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_names}, Signature={signature}",
            input.access_key
        ),
    ));
    added
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The "GET Object" example of AWS's Signature Version 4 documentation for S3.
    #[test]
    fn matches_the_documented_s3_example() {
        let url = reqwest::Url::parse("https://examplebucket.s3.amazonaws.com/test.txt").unwrap();
        let now = chrono::DateTime::parse_from_rfc3339("2013-05-24T00:00:00Z")
            .unwrap()
            .to_utc();
        let empty = sha256_hex(b"");
        let headers = sign(SignInput {
            method: "GET",
            url: &url,
            headers: vec![("range".into(), "bytes=0-9".into())],
            payload_hash: &empty,
            region: "us-east-1",
            service: "s3",
            access_key: "AKIAIOSFODNN7EXAMPLE",
            secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            session_token: None,
            now,
        });
        let auth = &headers
            .iter()
            .find(|(k, _)| k == "authorization")
            .unwrap()
            .1;
        assert!(
            auth.ends_with(
                "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
            ),
            "{auth}"
        );
    }
}
