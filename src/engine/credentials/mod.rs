//! Credentials per tenant: dotenv stores, and the reload report.

mod dotenv;
mod report;
mod store;

pub use report::{CredentialReport, CredentialStatus, ProviderCredentials};
pub(crate) use report::{auth_type, fingerprint, sourced_from, status};
// Used by the token-based auth types (oauth2, service_account).
#[allow(unused_imports)]
pub(crate) use store::{CachedToken, TokenCache};
pub use store::{CredentialSource, CredentialStore, SourceOutcome};
