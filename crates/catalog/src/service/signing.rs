//! Remote signing: the catalog signs an engine's S3 request when it touches only the table's
//! files and the caller may perform that kind of request.

use std::collections::HashMap;

use floe_storage::StorageProfile;
use floe_storage::sigv4::{SignInput, UNSIGNED_PAYLOAD, sign};
use iceberg::TableIdent;

use super::CatalogService;
use super::tables::validate_ident;
use crate::governance::authz::{Caller, Privilege};
use crate::{CatalogError, Result};

/// An S3 request to sign (the spec's `RemoteSignRequest`).
#[derive(Debug, Clone)]
pub struct SignRequest {
    pub method: String,
    pub uri: String,
    pub headers: HashMap<String, Vec<String>>,
    pub body: Option<String>,
}

fn keys_in_delete_body(body: &str) -> Vec<String> {
    body.split("<Key>")
        .skip(1)
        .filter_map(|rest| rest.split("</Key>").next())
        .map(|k| {
            k.replace("&amp;", "&")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
        })
        .collect()
}

impl CatalogService {
    /// Signs `request` with the warehouse's keys; the headers to send are returned.
    pub async fn sign_request(
        &self,
        caller: &Caller,
        warehouse: &str,
        ident: &TableIdent,
        request: SignRequest,
    ) -> Result<HashMap<String, Vec<String>>> {
        validate_ident(ident, "table")?;
        let wh = self.visible_warehouse(caller, warehouse).await?;
        let method = request.method.to_ascii_uppercase();
        let privilege = match method.as_str() {
            "GET" | "HEAD" => Privilege::ReadData,
            "PUT" | "POST" | "DELETE" | "PATCH" => Privilege::WriteData,
            other => {
                return Err(CatalogError::bad_request(format!(
                    "method {other} cannot be signed"
                )));
            }
        };
        let record = self.table_record(caller, &wh, ident, privilege).await?;
        self.refuse_raw_reads(caller, &record)?;
        let StorageProfile::S3(s3) = &wh.warehouse.storage else {
            return Err(CatalogError::bad_request(
                "the table's warehouse is not on S3; there is nothing to sign",
            ));
        };
        let (Some(access_key), Some(secret_key)) = (&s3.access_key_id, &s3.secret_access_key)
        else {
            return Err(CatalogError::Unavailable(
                "the warehouse has no keys to sign with".into(),
            ));
        };
        let url = reqwest_url(&request.uri)?;
        let table = wh.storage.require_inside(&record.location)?;
        let table_key = table.path().trim_matches('/').to_string();
        let refuse = |why: &str| {
            Err(CatalogError::PermissionDenied(format!(
                "will not sign this request for table {ident}: {why}"
            )))
        };
        // The request must go to this warehouse's endpoint, addressed the way it is configured.
        let endpoint_host = match &s3.endpoint {
            Some(endpoint) => reqwest_url(endpoint)?
                .host_str()
                .unwrap_or_default()
                .to_string(),
            None => format!("s3.{}.amazonaws.com", s3.region),
        };
        let host = url.host_str().unwrap_or_default().to_string();
        let path = url.path().trim_start_matches('/');
        let (bucket, raw_key) = if host == endpoint_host {
            path.split_once('/').unwrap_or((path, ""))
        } else if host == format!("{}.{endpoint_host}", s3.bucket) {
            (s3.bucket.as_str(), path)
        } else {
            return refuse("it is not addressed to the warehouse's endpoint");
        };
        if bucket != table.authority() {
            return refuse("it is not for the table's bucket");
        }
        let key = percent_decode(raw_key);
        let clean = |k: &str| !k.split('/').any(|s| matches!(s, "" | "." | ".."));
        let within = |k: &str| clean(k) && k.starts_with(&format!("{table_key}/"));
        if request
            .headers
            .keys()
            .any(|h| h.to_ascii_lowercase().starts_with("x-amz-copy-source"))
        {
            return refuse("copies are not signed");
        }
        const LISTING: [&str; 9] = [
            "prefix",
            "list-type",
            "continuation-token",
            "max-keys",
            "start-after",
            "delimiter",
            "encoding-type",
            "fetch-owner",
            "x-id",
        ];
        let sub_resources: Vec<String> = url
            .query_pairs()
            .map(|(k, _)| k.into_owned())
            .filter(|k| !LISTING.contains(&k.as_str()))
            .collect();
        let mut signed_body_hash = None;
        if key.is_empty() {
            // Bucket level: a listing under the table, or a multi-object delete of its files.
            match (method.as_str(), sub_resources.as_slice()) {
                ("GET", []) => {
                    let prefix = url
                        .query_pairs()
                        .find(|(k, _)| k == "prefix")
                        .map(|(_, v)| v.into_owned())
                        .unwrap_or_default();
                    if prefix != format!("{table_key}/") && !within(&format!("{prefix}x")) {
                        return refuse("the listing reaches outside the table");
                    }
                }
                ("POST", [d]) if d == "delete" => {
                    let body = request.body.as_deref().unwrap_or_default();
                    let keys = keys_in_delete_body(body);
                    if keys.is_empty() || keys.iter().any(|k| !within(k)) {
                        return refuse("the delete names files outside the table");
                    }
                    // Sign the body the catalog checked, not whatever the client claims.
                    signed_body_hash = Some(floe_storage::sigv4::sha256_hex(body.as_bytes()));
                }
                _ => {
                    return refuse(
                        "only listings and multi-object deletes are signed at bucket level",
                    );
                }
            }
        } else {
            if !within(&key) {
                return refuse("the object lies outside the table's location");
            }
            let allowed = ["uploads", "uploadId", "partNumber", "versionId"];
            if sub_resources.iter().any(|r| !allowed.contains(&r.as_str())) {
                return refuse(
                    "only object reads, writes, deletes and multipart uploads are signed",
                );
            }
        }
        let first = |name: &str| {
            request
                .headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.first().cloned())
        };
        let payload_hash = signed_body_hash
            .clone()
            .or_else(|| first("x-amz-content-sha256"))
            .unwrap_or_else(|| UNSIGNED_PAYLOAD.to_string());
        let to_sign: Vec<(String, String)> = request
            .headers
            .iter()
            .filter(|(k, _)| {
                let k = k.to_ascii_lowercase();
                (k.starts_with("x-amz-") || k == "content-type" || k == "range")
                    && !(signed_body_hash.is_some() && k == "x-amz-content-sha256")
            })
            .filter_map(|(k, v)| v.first().map(|v| (k.to_ascii_lowercase(), v.clone())))
            .collect();
        let added = sign(SignInput {
            method: &method,
            url: &url,
            headers: to_sign,
            payload_hash: &payload_hash,
            region: &s3.region,
            service: "s3",
            access_key,
            secret_key,
            session_token: None,
            now: chrono::Utc::now(),
        });
        let mut headers: HashMap<String, Vec<String>> = request
            .headers
            .into_iter()
            .filter(|(k, _)| !k.eq_ignore_ascii_case("authorization"))
            .collect();
        for (name, value) in added {
            headers.retain(|k, _| !k.eq_ignore_ascii_case(&name));
            headers.insert(name, vec![value]);
        }
        Ok(headers)
    }
}

fn reqwest_url(uri: &str) -> Result<url::Url> {
    url::Url::parse(uri)
        .map_err(|e| CatalogError::bad_request(format!("uri {uri:?} is not a URL: {e}")))
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_bodies_name_their_keys() {
        let body = "<Delete><Object><Key>a/b.parquet</Key></Object><Object><Key>x&amp;y</Key></Object></Delete>";
        assert_eq!(keys_in_delete_body(body), vec!["a/b.parquet", "x&y"]);
    }
}
