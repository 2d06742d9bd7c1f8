//! StackQL's signature files (`<document>.sig`): the base64 (standard alphabet, padded) of
//! the signing time followed by a 64-byte Ed25519 signature. The signing time is Go's
//! `time.Time.MarshalBinary` encoding (version 1: 15 bytes; version 2: 16), and the signed
//! message is the document's bytes followed by those same time bytes, so the time cannot be
//! changed without breaking the signature. A file of the bare 64 bytes carries no time, and
//! StackQL's verifier refuses it (it cannot tell which certificate was valid then); so does
//! querygate.

use base64::Engine as _;

/// Length of an Ed25519 signature.
pub(crate) const SIGNATURE_LEN: usize = 64;

/// The largest `.sig` file read: a signature is 108 base64 characters.
pub(crate) const MAX_SIGNATURE_FILE_BYTES: usize = 4096;

/// Seconds from 0001-01-01T00:00:00Z (Go's zero time, where its encoding counts from) to
/// the Unix epoch.
const GO_SECONDS_TO_UNIX: i64 = 62_135_596_800;

/// An instant, as Unix seconds and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct UnixTime {
    /// Seconds since 1970-01-01T00:00:00Z (negative before).
    pub(crate) seconds: i64,
    /// Nanoseconds within the second, below 1,000,000,000.
    pub(crate) nanos: u32,
}

impl UnixTime {
    /// A whole second (a certificate's `notBefore` / `notAfter`).
    pub(crate) fn at_second(seconds: i64) -> Self {
        UnixTime { seconds, nanos: 0 }
    }

    /// `time` as an instant (times before 1970 included).
    pub(crate) fn from_system(time: std::time::SystemTime) -> Self {
        match time.duration_since(std::time::UNIX_EPOCH) {
            Ok(after) => UnixTime {
                seconds: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
                nanos: after.subsec_nanos(),
            },
            Err(before) => {
                let before = before.duration();
                let seconds = i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
                match before.subsec_nanos() {
                    0 => UnixTime::at_second(-seconds),
                    nanos => UnixTime {
                        seconds: -seconds - 1,
                        nanos: 1_000_000_000 - nanos,
                    },
                }
            }
        }
    }
}

impl std::fmt::Display for UnixTime {
    /// RFC 3339 in UTC to the second (`2023-01-11T02:39:54Z`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let time = u64::try_from(self.seconds).ok().and_then(|secs| {
            std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs))
        });
        match time {
            Some(time) => write!(f, "{}", humantime::format_rfc3339_seconds(time)),
            None => write!(f, "{} seconds from 1970-01-01T00:00:00Z", self.seconds),
        }
    }
}

/// A parsed `.sig` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SignatureFile {
    /// When the document was signed.
    pub(crate) signed_at: UnixTime,
    /// The encoded time exactly as it appears in the file: the message is the document
    /// followed by these bytes.
    pub(crate) time_bytes: Vec<u8>,
    /// The Ed25519 signature.
    pub(crate) signature: [u8; SIGNATURE_LEN],
}

/// Why a `.sig` file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SignatureFormatError {
    /// Larger than any signature file.
    #[error("it is larger than {MAX_SIGNATURE_FILE_BYTES} bytes")]
    TooLarge,
    /// Not base64.
    #[error("it is not base64 text: {0}")]
    NotBase64(String),
    /// Shorter than a signature.
    #[error("it holds {0} bytes, fewer than the 64 of an Ed25519 signature")]
    TooShort(usize),
    /// Only a signature, without the signing time StackQL's verifier needs.
    #[error(
        "it holds a bare signature without a signing time (StackQL's verifier needs one to choose the certificate)"
    )]
    NoSigningTime,
    /// The bytes before the signature are not a Go binary time.
    #[error("its signing time is not readable: {0}")]
    BadTime(&'static str),
}

/// Reads a `.sig` file. Line breaks are ignored, as Go's base64 decoder ignores them.
pub(crate) fn parse(file: &[u8]) -> Result<SignatureFile, SignatureFormatError> {
    if file.len() > MAX_SIGNATURE_FILE_BYTES {
        return Err(SignatureFormatError::TooLarge);
    }
    let text: Vec<u8> = file
        .iter()
        .copied()
        .filter(|b| !matches!(b, b'\r' | b'\n'))
        .collect();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(&text)
        .map_err(|err| SignatureFormatError::NotBase64(err.to_string()))?;
    if raw.len() < SIGNATURE_LEN {
        return Err(SignatureFormatError::TooShort(raw.len()));
    }
    let (time_bytes, signature) = raw.split_at(raw.len() - SIGNATURE_LEN);
    if time_bytes.is_empty() {
        return Err(SignatureFormatError::NoSigningTime);
    }
    let signed_at = parse_go_time(time_bytes)?;
    let mut sig = [0u8; SIGNATURE_LEN];
    sig.copy_from_slice(signature);
    Ok(SignatureFile {
        signed_at,
        time_bytes: time_bytes.to_vec(),
        signature: sig,
    })
}

/// Go's `time.Time.MarshalBinary`: a version byte (1, or 2 when the zone offset has
/// seconds), seconds since Go's zero time (big-endian i64), nanoseconds (big-endian i32), the
/// zone offset in minutes (big-endian i16, -1 for UTC) and, in version 2, its seconds (i8).
/// The zone only says how the time was displayed; the instant is the same.
fn parse_go_time(bytes: &[u8]) -> Result<UnixTime, SignatureFormatError> {
    let expected = match bytes.first() {
        Some(1) => 15,
        Some(2) => 16,
        Some(_) => return Err(SignatureFormatError::BadTime("unknown encoding version")),
        None => return Err(SignatureFormatError::BadTime("empty")),
    };
    if bytes.len() != expected {
        return Err(SignatureFormatError::BadTime(
            "its length does not match its encoding version",
        ));
    }
    let field = |range: std::ops::Range<usize>| bytes.get(range).unwrap_or_default();
    let go_seconds = i64::from_be_bytes(
        field(1..9)
            .try_into()
            .map_err(|_| SignatureFormatError::BadTime("truncated"))?,
    );
    let nanos = i32::from_be_bytes(
        field(9..13)
            .try_into()
            .map_err(|_| SignatureFormatError::BadTime("truncated"))?,
    );
    let nanos = u32::try_from(nanos)
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .ok_or(SignatureFormatError::BadTime("nanoseconds out of range"))?;
    let seconds = go_seconds
        .checked_sub(GO_SECONDS_TO_UNIX)
        .ok_or(SignatureFormatError::BadTime("out of range"))?;
    Ok(UnixTime { seconds, nanos })
}

/// Go's version-1 binary encoding of `at` in UTC (offset -1), as StackQL's signer writes it
/// for a UTC time.
#[cfg(any(test, feature = "test-support"))]
pub(crate) fn go_time_bytes(at: UnixTime) -> Vec<u8> {
    let mut out = Vec::with_capacity(15);
    out.push(1);
    out.extend_from_slice(&(at.seconds + GO_SECONDS_TO_UNIX).to_be_bytes());
    out.extend_from_slice(&i32::try_from(at.nanos).unwrap_or(0).to_be_bytes());
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out
}

/// A `.sig` file for `document` signed at `at` with the Ed25519 key in `pkcs8` (v1 or v2
/// PKCS#8 DER), as StackQL's signer writes it. For tests: querygate never signs.
#[cfg(any(test, feature = "test-support"))]
pub fn sign_document(
    pkcs8: &[u8],
    document: &[u8],
    at: std::time::SystemTime,
) -> Result<Vec<u8>, String> {
    let key = ring::signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(pkcs8)
        .map_err(|err| format!("not an Ed25519 PKCS#8 key: {err}"))?;
    let time = go_time_bytes(UnixTime::from_system(at));
    let mut message = Vec::with_capacity(document.len() + time.len());
    message.extend_from_slice(document);
    message.extend_from_slice(&time);
    let mut raw = time;
    raw.extend_from_slice(key.sign(&message).as_ref());
    Ok(base64::engine::general_purpose::STANDARD
        .encode(raw)
        .into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// okta's `ThreatInsight.yaml.sig` of StackQL's test registry (any-sdk,
    /// `test/registry/deprecated-src/okta/v1/services/`), signed in Sydney (UTC+11).
    const REAL: &[u8] = include_bytes!("../../data/signing/tests/ThreatInsight.yaml.sig");

    #[test]
    fn reads_stackql_signature_files() {
        let sig = parse(REAL).unwrap();
        assert_eq!(sig.time_bytes.len(), 15);
        assert_eq!(sig.time_bytes[0], 1);
        // The zone offset (+11:00, 660 minutes) is kept in the bytes, not in the instant.
        assert_eq!(&sig.time_bytes[13..], &660i16.to_be_bytes());
        assert_eq!(sig.signed_at.to_string(), "2022-03-29T00:34:47Z");
        // Line breaks are ignored; anything else that is not base64 is refused.
        let mut wrapped = REAL[..40].to_vec();
        wrapped.extend_from_slice(b"\r\n");
        wrapped.extend_from_slice(&REAL[40..]);
        wrapped.push(b'\n');
        assert_eq!(parse(&wrapped).unwrap(), sig);
        assert!(matches!(
            parse(b"not base64!"),
            Err(SignatureFormatError::NotBase64(_))
        ));
    }

    #[test]
    fn refuses_bare_short_and_odd_signatures() {
        let b64 = |raw: &[u8]| base64::engine::general_purpose::STANDARD.encode(raw);
        assert_eq!(
            parse(b64(&[7; 64]).as_bytes()),
            Err(SignatureFormatError::NoSigningTime)
        );
        assert_eq!(
            parse(b64(&[7; 63]).as_bytes()),
            Err(SignatureFormatError::TooShort(63))
        );
        let mut raw = go_time_bytes(UnixTime::at_second(1_700_000_000));
        raw[0] = 3;
        raw.extend_from_slice(&[0; 64]);
        assert!(matches!(
            parse(b64(&raw).as_bytes()),
            Err(SignatureFormatError::BadTime(_))
        ));
        let mut raw = go_time_bytes(UnixTime::at_second(1_700_000_000));
        raw.push(0); // version 1 is 15 bytes
        raw.extend_from_slice(&[0; 64]);
        assert!(matches!(
            parse(b64(&raw).as_bytes()),
            Err(SignatureFormatError::BadTime(_))
        ));
        assert_eq!(
            parse(&[b'A'; MAX_SIGNATURE_FILE_BYTES + 4]),
            Err(SignatureFormatError::TooLarge)
        );
    }

    #[test]
    fn go_time_round_trips() {
        for at in [
            UnixTime::at_second(0),
            UnixTime {
                seconds: 1_673_404_794,
                nanos: 123_456_789,
            },
            UnixTime {
                seconds: -5,
                nanos: 1,
            },
        ] {
            let mut raw = go_time_bytes(at);
            raw.extend_from_slice(&[0; 64]);
            let file = base64::engine::general_purpose::STANDARD.encode(raw);
            assert_eq!(parse(file.as_bytes()).unwrap().signed_at, at);
        }
        let before = std::time::UNIX_EPOCH - std::time::Duration::from_millis(1500);
        assert_eq!(
            UnixTime::from_system(before),
            UnixTime {
                seconds: -2,
                nanos: 500_000_000
            }
        );
    }
}
