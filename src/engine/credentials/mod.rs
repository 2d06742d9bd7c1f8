//! Credentials per tenant: dotenv stores, and the reload report.

mod dotenv;
mod report;
mod store;

pub use report::{CredentialReport, CredentialStatus, ProviderCredentials};
pub(crate) use report::{auth_type, fingerprint, sourced_from, status};
pub(crate) use store::CachedToken;
pub use store::{CredentialSource, CredentialStore, SourceOutcome};
