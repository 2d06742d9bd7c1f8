//! HTTPS with rustls (ring, TLS 1.2 and 1.3): the server certificate and key from PEM files,
//! checked for changes every `reload_interval` and swapped in without a restart (a broken
//! new pair is logged and the old one kept); optional client certificates verified against
//! a CA bundle (mTLS). The handshake itself runs in each connection's task (see
//! [`super::server`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, Weak};
use std::time::SystemTime;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};

use crate::config::{ClientAuth, TlsConfig};

/// Why TLS cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read or holds no usable PEM item.
    #[error("server.tls: {0}")]
    Files(String),
    /// rustls refused the configuration.
    #[error("server.tls: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The server's TLS acceptor and the certificate it reloads.
#[derive(Clone)]
pub struct Tls {
    /// Accepts TLS connections.
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// The current certificate and key.
    pub certificate: Arc<ReloadingCertificate>,
    /// Where client certificates refused in the handshake are reported.
    pub refusals: Option<Arc<crate::auth::failures::FailureReporter>>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("certificate", &self.certificate.cert_file)
            .finish()
    }
}

/// Builds the acceptor for `config` (reads the files now: a broken pair fails start-up).
pub fn build(config: &TlsConfig) -> Result<Tls, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certificate = Arc::new(ReloadingCertificate::load(config, provider.clone())?);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match &config.client_ca_file {
        Some(ca_file) => {
            let mut roots = RootCertStore::empty();
            for cert in read_certs(ca_file)? {
                roots.add(cert).map_err(|err| {
                    TlsError::Files(format!(
                        "'{}' holds a CA certificate rustls cannot use: {err}",
                        ca_file.display()
                    ))
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match config.client_auth {
                ClientAuth::Required => verifier,
                ClientAuth::Optional => verifier.allow_unauthenticated(),
            }
            .build()
            .map_err(|err| TlsError::Files(format!("client CA bundle: {err}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut server = builder.with_cert_resolver(certificate.clone());
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls {
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
        certificate,
        refusals: None,
    })
}

/// The server certificate and key, replaced when their files change.
#[derive(Debug)]
pub struct ReloadingCertificate {
    cert_file: PathBuf,
    key_file: PathBuf,
    interval: std::time::Duration,
    provider: Arc<CryptoProvider>,
    current: RwLock<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    stamp: (Option<SystemTime>, Option<SystemTime>),
}

impl ReloadingCertificate {
    fn load(config: &TlsConfig, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let stamp = stamp(&config.cert_file, &config.key_file);
        let key = read_pair(&config.cert_file, &config.key_file, &provider)?;
        Ok(ReloadingCertificate {
            cert_file: config.cert_file.clone(),
            key_file: config.key_file.clone(),
            interval: config.reload_interval,
            provider,
            current: RwLock::new(Loaded {
                key: Arc::new(key),
                stamp,
            }),
        })
    }

    /// Reloads the pair if either file changed; keeps the old pair if the new one is broken.
    /// Returns whether a new pair is in use.
    pub fn reload_if_changed(&self) -> bool {
        let stamp = stamp(&self.cert_file, &self.key_file);
        if self.read().stamp == stamp {
            return false;
        }
        match read_pair(&self.cert_file, &self.key_file, &self.provider) {
            Ok(key) => {
                let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
                current.key = Arc::new(key);
                current.stamp = stamp;
                tracing::info!(cert = %self.cert_file.display(), "TLS certificate reloaded");
                true
            }
            Err(err) => {
                tracing::warn!("TLS certificate not reloaded, keeping the current one: {err}");
                false
            }
        }
    }

    /// Checks the files every `reload_interval` until the certificate is dropped.
    pub fn watch(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        let interval = self.interval;
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(this) = weak.upgrade() else { break };
                // Reading files blocks: keep it off the async workers.
                let _ = tokio::task::spawn_blocking(move || this.reload_if_changed()).await;
            }
        });
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        self.current.read().unwrap_or_else(|e| e.into_inner())
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.read().key.clone())
    }
}

fn stamp(cert: &Path, key: &Path) -> (Option<SystemTime>, Option<SystemTime>) {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (modified(cert), modified(key))
}

fn read_pair(
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = read_certs(cert_file)?;
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|err| {
        TlsError::Files(format!(
            "cannot read a private key from '{}': {err}",
            key_file.display()
        ))
    })?;
    Ok(CertifiedKey::from_der(chain, key, provider)?)
}

fn read_certs(file: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(file)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|err| {
            TlsError::Files(format!(
                "cannot read certificates from '{}': {err}",
                file.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(TlsError::Files(format!(
            "'{}' holds no PEM certificate",
            file.display()
        )));
    }
    Ok(certs)
}
