//! The private half of an OCI API signing key: a PEM RSA key, PKCS#8 (`PRIVATE KEY`, what
//! the OCI console downloads) or PKCS#1 (`RSA PRIVATE KEY`, what `openssl genrsa` wrote),
//! loaded into ring. Encrypted keys (`ENCRYPTED PRIVATE KEY`, or a PKCS#1 block with
//! `Proc-Type: 4,ENCRYPTED`) are refused: decrypting them would need a PKCS#5/PBES2
//! implementation the tree does not have. Text outside the PEM block (the console appends
//! an `OCI_API_KEY` line) is ignored. Errors name where the key came from, never its bytes.

use base64::Engine as _;
use ring::signature::RsaKeyPair;

/// Why a key cannot be used; the text names the key's origin (`shown`) only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// No `-----BEGIN …-----` / `-----END …-----` block.
    NotPem,
    /// The key is encrypted with a passphrase.
    Encrypted,
    /// A PEM block that is not an RSA private key (a public key, a certificate, EC).
    WrongKind(String),
    /// The base64 or DER inside does not decode, or ring refuses the key (it signs with
    /// RSA keys of 2048 to 8192 bits).
    Rejected(String),
}

impl KeyError {
    /// The cause, for a credential error about the key at `shown`.
    pub(crate) fn describe(&self, shown: &str) -> String {
        match self {
            KeyError::NotPem => format!("{shown} holds no PEM private key"),
            KeyError::Encrypted => format!(
                "{shown} is encrypted with a passphrase, which is not supported: decrypt it once (openssl rsa -in key.pem -out key-plain.pem) and keep the plain key in the tenant's secret store"
            ),
            KeyError::WrongKind(label) => {
                format!("{shown} holds a PEM '{label}', not an RSA private key")
            }
            KeyError::Rejected(why) => format!("{shown} is not a usable RSA key ({why})"),
        }
    }
}

/// The RSA key pair in `pem`.
pub(crate) fn load(pem: &str) -> Result<RsaKeyPair, KeyError> {
    // Keys pasted into one-line variables often carry literal `\n` escapes.
    let text = if pem.contains("\\n") && !pem.contains('\n') {
        pem.replace("\\n", "\n")
    } else {
        pem.to_owned()
    };
    let (label, headers, body) = block(&text).ok_or(KeyError::NotPem)?;
    if label == "ENCRYPTED PRIVATE KEY"
        || headers
            .iter()
            .any(|h| h.to_ascii_uppercase().starts_with("PROC-TYPE:") && h.contains("ENCRYPTED"))
    {
        return Err(KeyError::Encrypted);
    }
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|_| KeyError::Rejected("its base64 does not decode".to_owned()))?;
    let loaded = match label.as_str() {
        "PRIVATE KEY" => RsaKeyPair::from_pkcs8(&der),
        "RSA PRIVATE KEY" => RsaKeyPair::from_der(&der),
        other => return Err(KeyError::WrongKind(other.to_owned())),
    };
    loaded.map_err(|err| {
        KeyError::Rejected(format!(
            "{err}; OCI signing keys are RSA keys of 2048 to 8192 bits"
        ))
    })
}

/// The first PEM block: its label, its `Name: value` header lines and its base64 body.
fn block(text: &str) -> Option<(String, Vec<String>, String)> {
    let mut lines = text.lines().map(str::trim);
    let label = lines.find_map(|line| {
        line.strip_prefix("-----BEGIN ")
            .and_then(|rest| rest.strip_suffix("-----"))
    })?;
    let end = format!("-----END {label}-----");
    let mut headers = Vec::new();
    let mut body = String::new();
    for line in lines {
        if line == end {
            return Some((label.to_owned(), headers, body));
        }
        if line.contains(':') {
            headers.push(line.to_owned());
        } else {
            body.push_str(line);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const PKCS8: &str = include_str!("../../../../../tests/fixtures/oci/tenant_a_key.pem");
    const PKCS1: &str = include_str!("../../../../../tests/fixtures/oci/tenant_b_key.pem");
    const ENCRYPTED: &str = include_str!("../../../../../tests/fixtures/oci/encrypted_key.pem");

    #[test]
    fn pkcs8_and_pkcs1_keys_load_with_surrounding_text_or_escaped_newlines() {
        assert!(load(PKCS8).is_ok());
        assert!(load(PKCS1).is_ok());
        assert!(load(&format!("{PKCS8}OCI_API_KEY\n")).is_ok());
        assert!(load(&PKCS1.trim_end().replace('\n', "\\n")).is_ok());
    }

    #[test]
    fn encrypted_public_and_broken_keys_are_refused_by_kind() {
        assert_eq!(load(ENCRYPTED).err(), Some(KeyError::Encrypted));
        let legacy = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nAAAA\n-----END RSA PRIVATE KEY-----\n";
        assert_eq!(load(legacy).err(), Some(KeyError::Encrypted));
        let public = "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n";
        assert_eq!(
            load(public).err(),
            Some(KeyError::WrongKind("PUBLIC KEY".to_owned()))
        );
        assert_eq!(load("not a key").err(), Some(KeyError::NotPem));
        let cut = PKCS8.lines().take(5).collect::<Vec<_>>().join("\n");
        assert_eq!(load(&cut).err(), Some(KeyError::NotPem));
        let err = load(ENCRYPTED).err().map(|e| e.describe("file 'k.pem'"));
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("file 'k.pem' is encrypted")),
            "{err:?}"
        );
    }
}
