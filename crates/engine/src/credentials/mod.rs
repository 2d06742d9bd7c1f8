//! Credentials per tenant: dotenv stores, and the reload report.

mod dotenv;
mod report;
mod store;
mod subject;

pub(crate) use dotenv::read as read_credential_file;
pub use report::{CredentialReport, CredentialStatus, ProviderCredentials, ProviderSource};
pub(crate) use report::{
    SourceSummary, auth_type, fingerprint, resolved_source, source_summary, sourced_from, status,
    token_expires_at,
};
pub(crate) use store::CachedToken;
pub use store::{AwsRole, CredentialSource, CredentialStore, SourceOutcome};
pub use subject::{ExchangeKind, SubjectToken, TokenExchange};
