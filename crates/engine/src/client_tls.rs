//! The TLS settings of querygate's outbound HTTPS clients (provider APIs, JWKS, the query
//! library, the OTLP collector): rustls with ring, its safe protocol versions, and the
//! Mozilla roots of `webpki-roots`.

/// A rustls client configuration trusting the web PKI; `Err` says why it cannot be built.
pub fn web_pki() -> Result<rustls::ClientConfig, String> {
    let provider = rustls::crypto::ring::default_provider();
    Ok(rustls::ClientConfig::builder_with_provider(provider.into())
        .with_safe_default_protocol_versions()
        .map_err(|err| format!("TLS set-up failed: {err}"))?
        .with_root_certificates(rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        })
        .with_no_client_auth())
}
