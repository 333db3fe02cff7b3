//! TLS for the PostgreSQL wire protocol and Arrow Flight SQL front doors: one certificate
//! chain and private key (PEM files) for both, given with `--tls-cert` and `--tls-key`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate chain and key, read and checked once at start.
#[derive(Clone)]
pub struct TlsFiles {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    cert_path: PathBuf,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs.
        write!(f, "TlsFiles({})", self.cert_path.display())
    }
}

impl TlsFiles {
    /// Reads both files and checks that they make a usable server configuration; an error
    /// names the file and what is wrong with it.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, String> {
        let read = |path: &Path, what: &str| {
            std::fs::read(path).map_err(|e| format!("{what} {}: {e}", path.display()))
        };
        let files = Self {
            cert_pem: read(cert, "--tls-cert")?,
            key_pem: read(key, "--tls-key")?,
            cert_path: cert.to_path_buf(),
        };
        files.server_config()?;
        Ok(files)
    }

    fn server_config(&self) -> Result<tokio_rustls::rustls::ServerConfig, String> {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&self.cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| {
                format!(
                    "--tls-cert {}: not PEM certificates: {e}",
                    self.cert_path.display()
                )
            })?;
        if certs.is_empty() {
            return Err(format!(
                "--tls-cert {}: no certificate in the file",
                self.cert_path.display()
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem)
            .map_err(|e| format!("--tls-key: not a PEM private key: {e}"))?;
        tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("--tls-cert / --tls-key do not make a server identity: {e}"))
    }

    /// The acceptor of the PostgreSQL front door.
    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let config = self.server_config().expect("checked at load");
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }

    /// The identity of the Flight SQL front door.
    pub(crate) fn identity(&self) -> tonic::transport::Identity {
        tonic::transport::Identity::from_pem(&self.cert_pem, &self.key_pem)
    }
}
