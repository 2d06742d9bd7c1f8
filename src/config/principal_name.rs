//! Typed names of principals and groups, as approver rules and Cedar policies write them.
//!
//! A name says who vouched for it, so the same word from two sources is two names:
//! - `jwt:<issuer>#<sub>`: the subject of a token of that issuer (`auth.jwt.issuers[]`);
//! - `uri:<SAN>`, `dns:<SAN>`, `cn:<CN>`: an identity of a client certificate, typed as in
//!   `auth.mtls.identities`;
//! - `local`: the local user of stdio and the command line; `anonymous`: HTTP without
//!   authentication.
//!
//! A group is `jwt:<issuer>#<group>`: a name of that issuer's `groups` claim. Groups come
//! only from the issuer a name gives; certificates carry none.

use super::CertIdentity;

/// A typed principal name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrincipalName {
    /// The subject of a token of `issuer`.
    Jwt {
        /// The exact `iss`.
        issuer: String,
        /// The token's `sub`.
        subject: String,
    },
    /// An identity of a client certificate.
    Certificate(CertIdentity),
    /// The local user of stdio and the command line.
    Local,
    /// HTTP without authentication.
    Anonymous,
}

impl PrincipalName {
    /// Parses a typed name; the error says what was expected, with the typed form of a bare
    /// name.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "local" => return Ok(PrincipalName::Local),
            "anonymous" => return Ok(PrincipalName::Anonymous),
            _ => {}
        }
        if let Some(rest) = text.strip_prefix("jwt:") {
            let (issuer, subject) = split_jwt(rest).ok_or_else(|| {
                format!("'{text}' is not jwt:<issuer>#<sub> (an issuer, '#', then the subject)")
            })?;
            return Ok(PrincipalName::Jwt {
                issuer: issuer.to_owned(),
                subject: subject.to_owned(),
            });
        }
        if let Some(identity) = CertIdentity::parse(text) {
            return Ok(PrincipalName::Certificate(identity));
        }
        Err(format!(
            "'{text}' is a bare name, which would match that subject from any issuer: write 'jwt:<issuer>#{text}' for the subject of a token (the issuer as in auth.jwt.issuers[].issuer), or uri:, dns: or cn: for a client certificate's identity"
        ))
    }

    /// The issuer a JWT name is bound to.
    pub fn issuer(&self) -> Option<&str> {
        match self {
            PrincipalName::Jwt { issuer, .. } => Some(issuer),
            _ => None,
        }
    }
}

impl std::fmt::Display for PrincipalName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrincipalName::Jwt { issuer, subject } => write!(f, "jwt:{issuer}#{subject}"),
            PrincipalName::Certificate(identity) => identity.fmt(f),
            PrincipalName::Local => f.write_str("local"),
            PrincipalName::Anonymous => f.write_str("anonymous"),
        }
    }
}

/// A typed group name: `jwt:<issuer>#<group>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupName {
    /// The exact `iss` of the tokens whose groups claim holds it.
    pub issuer: String,
    /// The name in the claim.
    pub group: String,
}

impl GroupName {
    /// Parses `jwt:<issuer>#<group>`; the error gives the typed form of a bare name.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.strip_prefix("jwt:").and_then(split_jwt) {
            Some((issuer, group)) => Ok(GroupName {
                issuer: issuer.to_owned(),
                group: group.to_owned(),
            }),
            None => Err(format!(
                "'{text}' is not a typed group, and a bare group would match that name in the tokens of any issuer: write 'jwt:<issuer>#{}' (the issuer whose tokens' groups claim holds it, as in auth.jwt.issuers[].issuer)",
                text.strip_prefix("jwt:").unwrap_or(text)
            )),
        }
    }

    /// The typed form of group `group` of tokens of `issuer`.
    pub fn typed(issuer: &str, group: &str) -> String {
        format!("jwt:{issuer}#{group}")
    }
}

impl std::fmt::Display for GroupName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "jwt:{}#{}", self.issuer, self.group)
    }
}

/// `<issuer>#<name>`, split at the first `#` (an issuer is a URL without a fragment, and
/// `auth.jwt.issuers[].issuer` may not hold `#`); both parts non-empty.
fn split_jwt(rest: &str) -> Option<(&str, &str)> {
    let (issuer, name) = rest.split_once('#')?;
    (!issuer.is_empty() && !name.is_empty()).then_some((issuer, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_typed_and_bare_ones_are_refused_with_their_typed_form() {
        let jwt = PrincipalName::parse("jwt:https://idp.example#carol").unwrap();
        assert_eq!(jwt.issuer(), Some("https://idp.example"));
        assert_eq!(jwt.to_string(), "jwt:https://idp.example#carol");
        // The subject may hold '#': the issuer cannot.
        assert_eq!(
            PrincipalName::parse("jwt:https://idp#a#b").unwrap(),
            PrincipalName::Jwt {
                issuer: "https://idp".into(),
                subject: "a#b".into()
            }
        );
        assert_eq!(
            PrincipalName::parse("dns:Agent.Example")
                .unwrap()
                .to_string(),
            "dns:agent.example"
        );
        assert_eq!(
            PrincipalName::parse("uri:spiffe://x/approver")
                .unwrap()
                .to_string(),
            "uri:spiffe://x/approver"
        );
        assert_eq!(PrincipalName::parse("local").unwrap(), PrincipalName::Local);
        let bare = PrincipalName::parse("carol").unwrap_err();
        assert!(bare.contains("'jwt:<issuer>#carol'"), "{bare}");
        for bad in ["jwt:carol", "jwt:#carol", "jwt:https://idp#", "spiffe://x"] {
            assert!(PrincipalName::parse(bad).is_err(), "{bad}");
        }
        let group = GroupName::parse("jwt:https://idp#sre").unwrap();
        assert_eq!(
            (group.issuer.as_str(), group.group.as_str()),
            ("https://idp", "sre")
        );
        assert_eq!(group.to_string(), GroupName::typed("https://idp", "sre"));
        let bare = GroupName::parse("sre").unwrap_err();
        assert!(bare.contains("'jwt:<issuer>#sre'"), "{bare}");
        assert!(GroupName::parse("uri:spiffe://x").is_err());
    }
}
