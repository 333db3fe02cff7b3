//! A few signed S3 requests made directly, where Floe needs the store's exact answer (the
//! status and error code) rather than object_store's reading of it: bucket provisioning, and
//! validation's checks of what a vended credential may do. Answers are read up to
//! [`MAX_ANSWER_BYTES`]; requests time out after [`REQUEST_TIMEOUT`].

use std::time::Duration;

use base64::Engine;
use md5::{Digest, Md5};
use reqwest::{Method, StatusCode, Url};

use crate::S3Profile;
use crate::sigv4::{SignInput, aws_encode, sha256_hex, sign};
use crate::sts::xml_value;

/// The most of an answer read (a lifecycle configuration of 1,000 rules fits).
pub const MAX_ANSWER_BYTES: usize = 1 << 20;
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What a store answered.
pub(crate) struct Answer {
    pub status: StatusCode,
    /// The `Server` header names MinIO.
    pub minio: bool,
    pub body: String,
}

impl Answer {
    pub fn code(&self) -> Option<String> {
        xml_value(&self.body, "Code")
    }

    /// The store refused the request's credentials.
    pub fn refused(&self) -> bool {
        matches!(
            self.status,
            StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED
        )
    }

    /// The status with the store's error code and message, for reports.
    pub fn describe(&self) -> String {
        match (self.code(), xml_value(&self.body, "Message")) {
            (Some(code), Some(message)) => format!("{} ({code}: {message})", self.status),
            (Some(code), None) => format!("{} ({code})", self.status),
            _ => self.status.to_string(),
        }
    }
}

/// Keys to sign with: the warehouse's, or vended ones with their session token.
pub(crate) struct Keys<'a> {
    pub access_key: &'a str,
    pub secret_key: &'a str,
    pub session_token: Option<&'a str>,
}

/// One bucket of one store, reached with one set of keys.
pub(crate) struct S3Client<'a> {
    region: &'a str,
    keys: Keys<'a>,
    bucket_url: Url,
    http: reqwest::Client,
}

impl<'a> S3Client<'a> {
    pub fn new(s3: &'a S3Profile, keys: Keys<'a>) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(Self {
            region: &s3.region,
            keys,
            bucket_url: bucket_url(s3)?,
            http,
        })
    }

    /// A client with the warehouse's own keys.
    pub fn with_warehouse_keys(s3: &'a S3Profile) -> Result<Self, String> {
        let (Some(access_key), Some(secret_key)) = (&s3.access_key_id, &s3.secret_access_key)
        else {
            return Err("this needs the warehouse's access-key-id and secret-access-key".into());
        };
        Self::new(
            s3,
            Keys {
                access_key,
                secret_key,
                session_token: None,
            },
        )
    }

    /// The URL of `key` in the bucket (the bucket itself for an empty key).
    fn url(&self, key: &str) -> Url {
        let mut url = self.bucket_url.clone();
        if !key.is_empty() {
            let encoded: Vec<String> = key.split('/').map(aws_encode).collect();
            let path = format!("{}/{}", url.path().trim_end_matches('/'), encoded.join("/"));
            url.set_path(&path);
        }
        url
    }

    /// One signed request for `key` (empty: the bucket), with query pairs `query`
    /// (a sub-resource such as `lifecycle` has an empty value).
    pub async fn send(
        &self,
        method: Method,
        key: &str,
        query: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<Answer, String> {
        let mut url = self.url(key);
        if !query.is_empty() {
            let pairs: Vec<String> = query
                .iter()
                .map(|(k, v)| match *v {
                    "" => aws_encode(k),
                    v => format!("{}={}", aws_encode(k), aws_encode(v)),
                })
                .collect();
            url.set_query(Some(&pairs.join("&")));
        }
        let shown = format!("{method} {}", url.path());
        let mut headers = Vec::new();
        if !body.is_empty() {
            let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(&body));
            headers.push(("content-md5".to_string(), md5));
        }
        let payload_hash = sha256_hex(&body);
        let signed = sign(SignInput {
            method: method.as_str(),
            url: &url,
            headers: headers.clone(),
            payload_hash: &payload_hash,
            region: self.region,
            service: "s3",
            access_key: self.keys.access_key,
            secret_key: self.keys.secret_key,
            session_token: self.keys.session_token,
            now: chrono::Utc::now(),
        });
        let mut request = self.http.request(method, url);
        for (name, value) in headers.into_iter().chain(signed) {
            request = request.header(name, value);
        }
        // Errors are shown without reqwest's URL (it carries no secret, but the path is
        // already in `shown`).
        let mut response = request
            .body(body)
            .send()
            .await
            .map_err(|e| format!("{shown} failed: {}", e.without_url()))?;
        let status = response.status();
        let minio = response
            .headers()
            .get(reqwest::header::SERVER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|s| s.to_ascii_lowercase().contains("minio"));
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("reading the answer to {shown} failed: {}", e.without_url()))?
        {
            if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(format!(
                    "the answer to {shown} is larger than {MAX_ANSWER_BYTES} bytes"
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Answer {
            status,
            minio,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }
}

/// The URL of the bucket itself, addressed as the profile says.
pub(crate) fn bucket_url(s3: &S3Profile) -> Result<Url, String> {
    let base = match &s3.endpoint {
        Some(endpoint) => endpoint.trim_end_matches('/').to_string(),
        None => format!("https://s3.{}.amazonaws.com", s3.region),
    };
    let mut url = Url::parse(&base).map_err(|e| format!("bad endpoint {base}: {e}"))?;
    if s3.path_style_access {
        let path = format!("{}/{}", url.path().trim_end_matches('/'), s3.bucket);
        url.set_path(&path);
    } else {
        let host = url
            .host_str()
            .ok_or_else(|| format!("endpoint {base} has no host"))?
            .to_string();
        url.set_host(Some(&format!("{}.{host}", s3.bucket)))
            .map_err(|e| format!("bad bucket host for {base}: {e}"))?;
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(fields: serde_json::Value) -> S3Profile {
        let mut base = serde_json::json!({"bucket": "lake", "region": "eu-west-1"});
        base.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn urls_follow_the_addressing_style() {
        let path_style = profile(serde_json::json!({
            "endpoint": "http://127.0.0.1:9000/", "path-style-access": true
        }));
        assert_eq!(
            bucket_url(&path_style).unwrap().as_str(),
            "http://127.0.0.1:9000/lake"
        );
        let virtual_host = profile(serde_json::json!({"endpoint": "https://store.example"}));
        assert_eq!(
            bucket_url(&virtual_host).unwrap().as_str(),
            "https://lake.store.example/"
        );
        let aws = profile(serde_json::json!({}));
        assert_eq!(
            bucket_url(&aws).unwrap().as_str(),
            "https://lake.s3.eu-west-1.amazonaws.com/"
        );
        let keys = Keys {
            access_key: "a",
            secret_key: "s",
            session_token: None,
        };
        let client = S3Client::new(&path_style, keys).unwrap();
        assert_eq!(
            client.url("wh/a b/probe").as_str(),
            "http://127.0.0.1:9000/lake/wh/a%20b/probe"
        );
    }
}
