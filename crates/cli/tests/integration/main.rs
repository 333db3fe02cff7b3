//! End-to-end tests of the `floe` binary: a real server process, driven over HTTP by
//! iceberg-rust's REST client and by raw requests.

mod datafusion_slt;
mod distributed;
mod fuzz;
mod governance;
mod gray_failures;
mod harness;
mod http_contract;
mod netns;
mod oidc;
mod rest_client;
mod runtime_filters;
mod soft_delete;
mod tpcds;
mod work_units;
