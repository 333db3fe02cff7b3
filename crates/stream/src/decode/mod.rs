//! One decoder per format into Arrow, for every door: Arrow IPC within a memory budget
//! ([`ipc`]), a request's JSON or Arrow rows as a table's rows ([`rows`]), and Kafka's JSON,
//! Avro and Protobuf records (`crate::format`).

pub mod ipc;
pub mod rows;
