//! A cluster across network namespaces: three workers, each in a namespace of its own whose
//! only link is a virtual cable to a bridge, reach the coordinator, the catalog (PostgreSQL)
//! and the warehouse (an S3-compatible server) at the bridge's address. Nothing goes over
//! loopback, no table lives on the local file system, and each worker has a data directory of
//! its own: all 22 TPC-H answers (scale factor 0.1) still match Floe's alone, row by row.
//!
//! Needs root (to make namespaces), PostgreSQL and the S3 server the test script starts; in
//! CI a missing one fails the test, elsewhere the test says so and passes.

use std::net::Ipv4Addr;
use std::process::Command;

use tokio::net::{TcpListener, TcpStream};

/// Runs `ip` with `args`; whether it succeeded.
pub(crate) fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .is_ok_and(|status| status.success())
}

/// A bridge and namespaces linked to it, removed when dropped.
pub(crate) struct Namespaces {
    bridge: String,
    pub(crate) names: Vec<String>,
    /// The bridge's address: this process's, as the namespaces see it.
    pub(crate) host: Ipv4Addr,
    /// Each namespace's address.
    pub(crate) addresses: Vec<Ipv4Addr>,
    /// Each namespace's cable, at the bridge's end.
    cables: Vec<String>,
}

impl Namespaces {
    /// Cuts namespace `i`'s cable (`false`: links it again). Nothing is refused or reset:
    /// what crosses it is lost, as when a machine drops off the network.
    pub(crate) fn cut(&self, i: usize, cut: bool) {
        let state = if cut { "down" } else { "up" };
        assert!(
            ip(&["link", "set", &self.cables[i], state]),
            "ip link set {state}"
        );
    }

    pub(crate) fn make(count: u8) -> Option<Namespaces> {
        // Tests of one process make theirs apart (a bridge and subnet each).
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let seq = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2;
        let tag = format!("{}{seq}", std::process::id() % 100_000);
        let subnet = ((std::process::id() % 125) * 2 + seq) as u8;
        let host = Ipv4Addr::new(10, 231, subnet, 1);
        let mut made = Namespaces {
            bridge: format!("flbr{tag}"),
            names: Vec::new(),
            host,
            addresses: Vec::new(),
            cables: Vec::new(),
        };
        if !ip(&["link", "add", &made.bridge, "type", "bridge"]) {
            return None;
        }
        let ok = ip(&["addr", "add", &format!("{host}/24"), "dev", &made.bridge])
            && ip(&["link", "set", &made.bridge, "up"]);
        if !ok {
            return None;
        }
        for i in 0..count {
            let name = format!("floe-{tag}-w{i}");
            let (outer, inner) = (format!("flv{tag}{i}"), format!("flp{tag}{i}"));
            let address = Ipv4Addr::new(10, 231, subnet, 11 + i);
            if !ip(&["netns", "add", &name]) {
                return None;
            }
            made.names.push(name.clone());
            let cidr = format!("{address}/24");
            let ok = ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ]) && ip(&["link", "set", &inner, "netns", &name])
                && ip(&["link", "set", &outer, "master", &made.bridge])
                && ip(&["link", "set", &outer, "up"])
                && ip(&[
                    "netns", "exec", &name, "ip", "addr", "add", &cidr, "dev", &inner,
                ])
                && ip(&["netns", "exec", &name, "ip", "link", "set", &inner, "up"])
                && ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"]);
            if !ok {
                return None;
            }
            made.addresses.push(address);
            made.cables.push(outer);
        }
        Some(made)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in &self.names {
            ip(&["netns", "del", name]);
        }
        ip(&["link", "del", &self.bridge]);
    }
}

/// Forwards connections to `host:0` (the port it returns) to `target` on loopback, for as long
/// as the test runs.
async fn forward(host: Ipv4Addr, target: u16) -> u16 {
    let listener = TcpListener::bind((host, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    port
}

fn port_of(url: &str) -> u16 {
    url::Url::parse(url).unwrap().port().unwrap()
}

/// Whether the test can run here; in CI, it must.
pub(crate) fn skip(why: &str) -> bool {
    assert!(std::env::var("CI").is_err(), "in CI: {why}");
    eprintln!("skipped: {why}");
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpch_over_workers_in_network_namespaces_answers_as_one_node_does() {
    let (Ok(postgres), Ok(s3)) = (
        std::env::var("FLOE_TEST_POSTGRES_URL"),
        std::env::var("FLOE_TEST_S3_ENDPOINT"),
    ) else {
        skip("PostgreSQL and the S3 server were not started (scripts/test starts them)");
        return;
    };
    let Some(namespaces) = Namespaces::make(3) else {
        skip("network namespaces cannot be made here (root and iproute2 are needed)");
        return;
    };
    let host = namespaces.host;
    let catalog_port = forward(host, port_of(&postgres)).await;
    let s3_port = forward(host, port_of(&s3)).await;
    let mut catalog = url::Url::parse(&crate::harness::fresh_postgres_database().await).unwrap();
    catalog.set_host(Some(&host.to_string())).unwrap();
    catalog.set_port(Some(catalog_port)).unwrap();
    let places: Vec<String> = namespaces
        .names
        .iter()
        .zip(&namespaces.addresses)
        .map(|(name, address)| format!("{name}={address}"))
        .collect();

    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args([
            "bench",
            "tpch",
            "--sf",
            "0.1",
            "--workers",
            "3",
            "--iterations",
            "0",
        ])
        .arg("--dir")
        .arg(dir.path())
        .args(["--catalog-db", catalog.as_str()])
        .args([
            "--s3-bucket",
            &std::env::var("FLOE_TEST_S3_BUCKET").unwrap(),
        ])
        .args(["--s3-endpoint", &format!("http://{host}:{s3_port}")])
        .args(["--worker-netns", &places.join(",")])
        .args(["--coordinator-ip", &host.to_string()])
        .env(
            "FLOE_BENCH_S3_ACCESS_KEY",
            std::env::var("FLOE_TEST_S3_ACCESS_KEY").unwrap(),
        )
        .env(
            "FLOE_BENCH_S3_SECRET_KEY",
            std::env::var("FLOE_TEST_S3_SECRET_KEY").unwrap(),
        )
        .env("FLOE_LOG", "warn")
        .output()
        .await
        .expect("run floe bench tpch across namespaces");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let logs: String = (0..3)
        .map(|i| {
            let log = dir.path().join(format!("sf0.1/worker-{i}/worker.log"));
            format!(
                "worker {i}: {}\n",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        })
        .collect();
    assert!(
        out.status.success(),
        "{stdout}\n{}\n{logs}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            "22 of 22 distributed answers identical to Floe alone's, row by row; 22 of them ran \
             in stages on the workers"
        ),
        "{stdout}\n{logs}"
    );
    drop(namespaces);
}
