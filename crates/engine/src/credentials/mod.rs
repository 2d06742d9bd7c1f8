//! Credentials per tenant: dotenv stores, cached tokens, the subject tokens of token exchange
//! (below `upstream`, which reads them; the reload report over both is `credential_report`).

mod dotenv;
mod store;
mod subject;

pub(crate) use dotenv::read as read_credential_file;
pub(crate) use store::CachedToken;
pub use store::{AwsRole, CredentialSource, CredentialStore, SourceOutcome};
pub use subject::{ExchangeKind, SubjectToken, TokenExchange};
