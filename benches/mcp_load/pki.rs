//! The certificates, client configurations and JWTs of the HTTPS servers, generated per run.

use super::*;

/// Certificates and a JWT key for the HTTPS servers, generated for this run.
pub(crate) struct Pki {
    pub(crate) ca_pem: String,
    pub(crate) ca_file: std::path::PathBuf,
    pub(crate) server_cert: std::path::PathBuf,
    pub(crate) server_key: std::path::PathBuf,
    pub(crate) client: (String, String),
    pub(crate) jwt_key: rcgen::KeyPair,
    pub(crate) jwt_public: std::path::PathBuf,
}

impl Pki {
    pub(crate) fn new(dir: &Path) -> Result<Pki> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType,
        };
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "bench CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        let issue = |sans: Vec<SanType>| -> Result<(String, String)> {
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params.subject_alt_names = sans;
            let key = KeyPair::generate()?;
            Ok((params.signed_by(&key, &ca)?.pem(), key.serialize_pem()))
        };
        let server = issue(vec![SanType::IpAddress("127.0.0.1".parse()?)])?;
        let client = issue(vec![SanType::URI("spiffe://bench/agent".try_into()?)])?;
        let jwt_key = KeyPair::generate()?;
        let write = |name: &str, text: &str| -> Result<std::path::PathBuf> {
            let path = dir.join(name);
            std::fs::write(&path, text)?;
            Ok(path)
        };
        Ok(Pki {
            ca_pem: ca.pem(),
            ca_file: write("ca.pem", &ca.pem())?,
            server_cert: write("server.pem", &server.0)?,
            server_key: write("server.key", &server.1)?,
            jwt_public: write("jwt.pub.pem", &jwt_key.public_key_pem())?,
            client,
            jwt_key,
        })
    }

    /// A keep-alive HTTPS client trusting the CA, with the client certificate if `mtls`.
    pub(crate) fn client(&self, mtls: bool) -> Result<reqwest::Client> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(self.ca_pem.as_bytes())?)?;
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
        let config = if mtls {
            builder.with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(self.client.0.as_bytes())?],
                PrivateKeyDer::from_pem_slice(self.client.1.as_bytes())?,
            )?
        } else {
            builder.with_no_client_auth()
        };
        Ok(reqwest::Client::builder()
            .tls_backend_preconfigured(config)
            .http1_only()
            .pool_max_idle_per_host(256)
            .build()?)
    }

    /// A token of `tenant` for the JWT servers, valid for an hour.
    pub(crate) fn token(&self, tenant: &str) -> Result<String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs();
        let claims = json!({"iss": "https://idp.bench.test", "aud": "https://bench.test/mcp",
            "sub": "bench", "tenant": tenant, "exp": now + 3600});
        let key = jsonwebtoken::EncodingKey::from_ec_pem(self.jwt_key.serialize_pem().as_bytes())?;
        Ok(jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256),
            &claims,
            &key,
        )?)
    }
}
