//! `aws_signing_v4`: every request is signed (AWS Signature Version 4) just before it is
//! sent, over its final URL, headers and body. The access key id comes from `keyIDenvvar`
//! (or inline `keyID`), the secret from `credentialsenvvar`, an optional session token
//! from the variable named by `sessiontokenenvvar` (default `AWS_SESSION_TOKEN`). Region
//! and service come from the host (`ec2.us-east-1.amazonaws.com`; a global host such as
//! `iam.amazonaws.com` means `us-east-1`) unless `signing_region` / `signing_service` say.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;

use super::super::{credential_error, field};
use super::credentials::AwsCredentials;
use crate::error::{Error, Result};
use crate::upstream::RequestSigner;

/// The session-token variable read when the auth config names none (as StackQL does).
const DEFAULT_SESSION_TOKEN_VAR: &str = "AWS_SESSION_TOKEN";

/// The variable an `aws_signing_v4` auth object reads its session token from.
pub(crate) fn session_token_var(auth: &Value) -> &str {
    field(auth, "sessiontokenenvvar").unwrap_or(DEFAULT_SESSION_TOKEN_VAR)
}

/// Signs requests for one provider. Holds the secret key: its `Debug` shows the region and
/// service overrides only.
pub(crate) struct Signer {
    provider: String,
    key_id: String,
    secret: String,
    session_token: Option<String>,
    region: Option<String>,
    service: Option<String>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("region", &self.region)
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer for `auth` with `credentials` (resolved by the AWS credential chain).
    pub(crate) fn new(provider: &str, auth: &Value, credentials: AwsCredentials) -> Self {
        Signer {
            provider: provider.to_owned(),
            key_id: credentials.key_id,
            secret: credentials.secret,
            session_token: credentials.session_token,
            region: field(auth, "signing_region").map(str::to_owned),
            service: field(auth, "signing_service").map(str::to_owned),
        }
    }

    /// A signer of STS requests in `region`.
    pub(super) fn for_sts(provider: &str, region: &str, credentials: AwsCredentials) -> Self {
        Signer {
            provider: provider.to_owned(),
            key_id: credentials.key_id,
            secret: credentials.secret,
            session_token: credentials.session_token,
            region: Some(region.to_owned()),
            service: Some("sts".to_owned()),
        }
    }

    /// Signs `request` at `time`: adds `x-amz-date`, `authorization` (and
    /// `x-amz-security-token`, `x-amz-content-sha256` for S3) headers.
    pub(super) fn sign_at(&self, request: &mut reqwest::Request, time: SystemTime) -> Result<()> {
        let provider = &self.provider;
        let host = request.url().host_str().unwrap_or_default().to_owned();
        let derived = region_and_service(&host);
        let region = self
            .region
            .clone()
            .or_else(|| derived.as_ref().map(|(region, _)| region.clone()));
        let service = self
            .service
            .clone()
            .or_else(|| derived.as_ref().map(|(_, service)| service.clone()));
        let (Some(region), Some(service)) = (region, service) else {
            return Err(Error::bad_document(format!(
                "provider '{provider}': cannot tell the AWS region and service from host '{host}'; set signing_region and signing_service in the auth config"
            )));
        };
        let mut settings = SigningSettings::default();
        if service == "s3" {
            settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
            settings.percent_encoding_mode = PercentEncodingMode::Single;
            settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        }
        let identity = Credentials::new(
            self.key_id.clone(),
            self.secret.clone(),
            self.session_token.clone(),
            None,
            "querygate",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&region)
            .name(&service)
            .time(time)
            .settings(settings)
            .build()
            .map_err(|err| Error::internal(format!("SigV4 parameters: {err}")))?
            .into();
        let failed = |what: &str| {
            credential_error(
                provider,
                &format!("the request to {host} could not be signed ({what})"),
            )
        };
        let instructions = {
            let headers = request
                .headers()
                .iter()
                .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
            let body = match request.body() {
                None => SignableBody::empty(),
                Some(body) => match body.as_bytes() {
                    Some(bytes) => SignableBody::Bytes(bytes),
                    None => SignableBody::UnsignedPayload,
                },
            };
            let signable = SignableRequest::new(
                request.method().as_str(),
                request.url().as_str(),
                headers,
                body,
            )
            .map_err(|_| failed("its URL or headers are not signable"))?;
            sign(signable, &params)
                .map_err(|_| failed("signing failed"))?
                .into_parts()
                .0
        };
        let (headers, _) = instructions.into_parts();
        for header in headers {
            let mut value =
                HeaderValue::from_str(header.value()).map_err(|_| failed("bad header value"))?;
            value.set_sensitive(header.sensitive() || header.name() == "authorization");
            request
                .headers_mut()
                .insert(HeaderName::from_static(header.name()), value);
        }
        Ok(())
    }
}

/// Region and service from an AWS host name: `<service>.<region>.amazonaws.com`, with any
/// leading labels (`bucket.s3.…`) ignored, a `-fips` suffix dropped and the legacy
/// `s3-<region>` form understood; a host without a region is a global endpoint
/// (`us-east-1`, or `cn-north-1` under `amazonaws.com.cn`). Other hosts give `None`.
pub(crate) fn region_and_service(host: &str) -> Option<(String, String)> {
    let host = host.to_ascii_lowercase();
    let (rest, global_region) = if let Some(rest) = host.strip_suffix(".amazonaws.com") {
        (rest, "us-east-1")
    } else if let Some(rest) = host.strip_suffix(".amazonaws.com.cn") {
        (rest, "cn-north-1")
    } else {
        return None;
    };
    let labels: Vec<&str> = rest.split('.').filter(|l| !l.is_empty()).collect();
    let (service, region) = match labels.as_slice() {
        [.., service, region] if looks_like_region(region) => (*service, (*region).to_owned()),
        [.., service] => match service.strip_prefix("s3-").filter(|r| looks_like_region(r)) {
            Some(region) => ("s3", region.to_owned()),
            None => (*service, global_region.to_owned()),
        },
        [] => return None,
    };
    let service = service.strip_suffix("-fips").unwrap_or(service);
    Some((region, service.to_owned()))
}

/// `us-east-1`, `us-gov-west-1`, `ap-southeast-2`: letters, a part or two, then digits.
fn looks_like_region(label: &str) -> bool {
    let parts: Vec<&str> = label.split('-').collect();
    parts.len() >= 3
        && parts[0].len() == 2
        && parts[..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase()))
        && parts
            .last()
            .is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

impl RequestSigner for Signer {
    /// Signs `request` as it will be sent, now.
    fn sign(&self, request: &mut reqwest::Request) -> Result<()> {
        self.sign_at(request, SystemTime::now())
    }

    /// The secret key and session token (to scrub them from upstream error bodies).
    fn secrets(&self) -> Vec<String> {
        let mut secrets = vec![self.secret.clone()];
        secrets.extend(self.session_token.clone());
        secrets
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::{Duration, UNIX_EPOCH};

    /// 2015-08-30T12:36:00Z, the time of AWS's published SigV4 test suite.
    fn suite_time() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_440_938_160)
    }

    fn request(method: &str, url: &str) -> reqwest::Request {
        reqwest::Request::new(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            url::Url::parse(url).unwrap(),
        )
    }

    fn suite_signer(region: Option<&str>, service: Option<&str>) -> Signer {
        Signer {
            provider: "aws".to_owned(),
            key_id: "AKIDEXAMPLE".to_owned(),
            secret: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".to_owned(),
            session_token: None,
            region: region.map(str::to_owned),
            service: service.map(str::to_owned),
        }
    }

    #[test]
    fn get_vanilla_matches_the_aws_test_suite() {
        let mut request = request("GET", "https://example.amazonaws.com/");
        suite_signer(Some("us-east-1"), Some("service"))
            .sign_at(&mut request, suite_time())
            .unwrap();
        assert_eq!(request.headers()["x-amz-date"], "20150830T123600Z");
        assert_eq!(
            request.headers()["authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
        assert!(request.headers()["authorization"].is_sensitive());
    }

    #[test]
    fn iam_list_users_matches_the_aws_documentation() {
        // The IAM example of AWS's SigV4 documentation: region and service from the host.
        let mut request = request(
            "GET",
            "https://iam.amazonaws.com/?Action=ListUsers&Version=2010-05-08",
        );
        request.headers_mut().insert(
            "content-type",
            HeaderValue::from_static("application/x-www-form-urlencoded; charset=utf-8"),
        );
        suite_signer(None, None)
            .sign_at(&mut request, suite_time())
            .unwrap();
        assert_eq!(
            request.headers()["authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    #[test]
    fn bodies_are_part_of_the_signature() {
        let signer = suite_signer(Some("us-east-1"), Some("service"));
        let signature = |body: &'static str| {
            let mut request = request("POST", "https://example.amazonaws.com/");
            *request.body_mut() = Some(reqwest::Body::from(body));
            signer.sign_at(&mut request, suite_time()).unwrap();
            request.headers()["authorization"]
                .to_str()
                .unwrap()
                .to_owned()
        };
        assert_ne!(signature("{\"a\":1}"), signature("{\"a\":2}"));
        assert_eq!(signature("{\"a\":1}"), signature("{\"a\":1}"));
    }

    #[test]
    fn hosts_give_region_and_service() {
        let pair = |r: &str, s: &str| Some((r.to_owned(), s.to_owned()));
        assert_eq!(
            region_and_service("ec2.us-east-1.amazonaws.com"),
            pair("us-east-1", "ec2")
        );
        assert_eq!(
            region_and_service("iam.amazonaws.com"),
            pair("us-east-1", "iam")
        );
        assert_eq!(
            region_and_service("my-bucket.s3.eu-west-2.amazonaws.com"),
            pair("eu-west-2", "s3")
        );
        assert_eq!(
            region_and_service("s3-us-west-2.amazonaws.com"),
            pair("us-west-2", "s3")
        );
        assert_eq!(
            region_and_service("ec2-fips.us-gov-west-1.amazonaws.com"),
            pair("us-gov-west-1", "ec2")
        );
        assert_eq!(
            region_and_service("ec2.cn-northwest-1.amazonaws.com.cn"),
            pair("cn-northwest-1", "ec2")
        );
        assert_eq!(region_and_service("127.0.0.1"), None);
        assert_eq!(region_and_service("api.example.com"), None);
    }

    #[test]
    fn unknown_hosts_need_explicit_region_and_service() {
        let mut request = request("GET", "http://127.0.0.1:9/x");
        let err = suite_signer(None, None)
            .sign_at(&mut request, suite_time())
            .unwrap_err();
        assert!(err.message().contains("signing_region"), "{err}");
        suite_signer(Some("eu-west-1"), Some("ec2"))
            .sign_at(&mut request, suite_time())
            .unwrap();
        let auth = request.headers()["authorization"].to_str().unwrap();
        assert!(
            auth.contains("/20150830/eu-west-1/ec2/aws4_request"),
            "{auth}"
        );
    }

    #[test]
    fn session_tokens_are_signed_and_never_shown() {
        let auth = json!({"type": "aws_signing_v4", "keyIDenvvar": "K", "credentialsenvvar": "S",
                          "signing_region": "us-east-1", "signing_service": "sts"});
        let signer = Signer::new(
            "aws",
            &auth,
            AwsCredentials {
                key_id: "AKID".to_owned(),
                secret: "secret-value".to_owned(),
                session_token: Some("session-value".to_owned()),
            },
        );
        assert!(!format!("{signer:?}").contains("secret-value"));
        assert_eq!(signer.secrets(), ["secret-value", "session-value"]);
        let mut request = request("POST", "http://127.0.0.1:9/");
        *request.body_mut() = Some(reqwest::Body::from("Action=GetCallerIdentity"));
        signer.sign_at(&mut request, suite_time()).unwrap();
        assert_eq!(request.headers()["x-amz-security-token"], "session-value");
        assert!(request.headers()["x-amz-security-token"].is_sensitive());
    }
}
