//! Signing roots made at test time: a self-signed Ed25519 certificate (rcgen) and its key,
//! whose signatures are written as StackQL's signer writes them
//! (`querygate::engine::sign_document`). The shared [`signer`] is what every test server and
//! registry engine trusts (`registry.trusted_certificates`), so test packages are signed
//! rather than verification turned off.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;

use crate::support::packages::{Item, tgz};

/// A signing certificate and its key.
pub struct Signer {
    pkcs8: Vec<u8>,
    cert_path: PathBuf,
}

impl Signer {
    /// A new key and a self-signed certificate valid from `from` to `to` (year, month, day),
    /// its PEM written under the tests' temporary folder.
    pub fn new(name: &str, from: (i32, u8, u8), to: (i32, u8, u8)) -> Signer {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "querygate tests");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
        params.not_after = rcgen::date_time_ymd(to.0, to.1, to.2);
        let cert = params.self_signed(&key).unwrap();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("signers");
        std::fs::create_dir_all(&dir).unwrap();
        let cert_path = dir.join(format!(
            "{}-{name}-{}.pem",
            std::process::id(),
            &hex(&key.public_key_raw()[..6])
        ));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        Signer {
            pkcs8: key.serialize_der(),
            cert_path,
        }
    }

    /// A root valid from 2020 to 2100.
    pub fn current(name: &str) -> Signer {
        Signer::new(name, (2020, 1, 1), (2100, 1, 1))
    }

    /// The certificate's PEM file.
    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }

    /// The `.sig` file of `document`, signed now.
    pub fn sign(&self, document: &[u8]) -> Vec<u8> {
        self.sign_at(document, SystemTime::now())
    }

    /// The `.sig` file of `document`, signed at `at`.
    pub fn sign_at(&self, document: &[u8], at: SystemTime) -> Vec<u8> {
        querygate::engine::sign_document(&self.pkcs8, document, at).unwrap()
    }

    /// `items` with every `.sig` replaced: each file gets one, made by this signer.
    pub fn signed(&self, items: Vec<Item>) -> Vec<Item> {
        let mut out = Vec::new();
        let mut sigs = Vec::new();
        for item in items {
            match item {
                Item::File(path, _) if path.ends_with(".sig") => {}
                Item::File(path, data) => {
                    let sig: &'static str = Box::leak(format!("{path}.sig").into_boxed_str());
                    sigs.push(Item::File(sig, self.sign(&data)));
                    out.push(Item::File(path, data));
                }
                other => out.push(other),
            }
        }
        out.append(&mut sigs);
        out
    }

    /// [`Signer::signed`] as a package.
    pub fn signed_tgz(&self, items: Vec<Item>) -> Vec<u8> {
        tgz(self.signed(items))
    }

    /// A real package (`.tgz`) with its `.sig` files replaced by this signer's.
    pub fn resign_package(&self, package: &[u8]) -> Vec<u8> {
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(package));
        let mut items = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path: &'static str = Box::leak(
                entry
                    .path()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
                    .into_boxed_str(),
            );
            if entry.header().entry_type().is_dir() {
                items.push(Item::Dir(path));
            } else if entry.header().entry_type().is_file() {
                let mut data = Vec::new();
                entry.read_to_end(&mut data).unwrap();
                items.push(Item::File(path, data));
            }
        }
        self.signed_tgz(items)
    }
}

/// The signer every test server and registry engine trusts (made once per test process).
pub fn signer() -> &'static Signer {
    static SIGNER: OnceLock<Signer> = OnceLock::new();
    SIGNER.get_or_init(|| Signer::current("trusted-test-root"))
}

/// `items` signed by [`signer`], as a package.
pub fn signed_tgz(items: Vec<Item>) -> Vec<u8> {
    signer().signed_tgz(items)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
