//! Remote signing: the catalog signs an engine's S3 request when it touches only the table's
//! files and the caller may perform that kind of request.

use std::collections::HashMap;

use floe_storage::StorageProfile;
use floe_storage::sigv4::{SignInput, UNSIGNED_PAYLOAD, sign};
use iceberg::TableIdent;

use super::CatalogService;
use super::tables::validate_ident;
use crate::governance::authz::{Caller, Privilege};
use crate::model::TabularKind;
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
        let record = match self.find_tabular(&wh, ident).await? {
            Some(r) if r.kind == TabularKind::Table => r,
            _ => return Err(CatalogError::no_such_table(ident)),
        };
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
        caller.require(privilege, &record.scope(), || {
            CatalogError::no_such_table(ident)
        })?;
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
        let host = url.host_str().unwrap_or_default();
        let mut segments = url.path().trim_start_matches('/').splitn(2, '/');
        let (bucket, key) = if host.starts_with(&format!("{}.", s3.bucket)) {
            (
                s3.bucket.clone(),
                url.path().trim_start_matches('/').to_string(),
            )
        } else {
            (
                segments.next().unwrap_or_default().to_string(),
                segments.next().unwrap_or_default().to_string(),
            )
        };
        let key = percent_decode(&key);
        let within = |k: &str| k == table_key || k.starts_with(&format!("{table_key}/"));
        if bucket != table.authority() {
            return Err(CatalogError::PermissionDenied(format!(
                "bucket {bucket} is not the table's bucket"
            )));
        }
        let touched: Vec<String> = if key.is_empty() {
            // A bucket-level request: listing must stay under the table.
            let prefix = url
                .query_pairs()
                .find(|(k, _)| k == "prefix")
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default();
            if url.query_pairs().any(|(k, _)| k == "delete") {
                keys_in_delete_body(request.body.as_deref().unwrap_or_default())
            } else {
                vec![prefix]
            }
        } else {
            vec![key]
        };
        if touched.is_empty() || touched.iter().any(|k| !within(k)) {
            return Err(CatalogError::PermissionDenied(format!(
                "the request reaches outside table {ident}'s location"
            )));
        }
        let first = |name: &str| {
            request
                .headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.first().cloned())
        };
        let payload_hash =
            first("x-amz-content-sha256").unwrap_or_else(|| UNSIGNED_PAYLOAD.to_string());
        let to_sign: Vec<(String, String)> = request
            .headers
            .iter()
            .filter(|(k, _)| {
                let k = k.to_ascii_lowercase();
                k.starts_with("x-amz-") || k == "content-md5" || k == "content-type" || k == "range"
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
