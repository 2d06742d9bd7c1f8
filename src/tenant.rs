//! Tenants: who a request runs for, and the [`ExecContext`] the engine receives for it.
//!
//! Until authentication lands every request runs as [`Principal::anonymous`] (principal
//! `anonymous` of tenant `default`). The HTTP stage's auth layer will put a `Principal` in
//! request extensions; the tool-call stage turns it into an `ExecContext` here.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Config, Mode, TenantConfig};
use crate::engine::{CredentialSource, ExecContext, ProcessEnv};

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The caller's identity (JWT subject, certificate name, or `anonymous`).
    pub subject: String,
    /// The tenant the caller belongs to.
    pub tenant: String,
}

impl Principal {
    /// The principal every request uses before authentication exists.
    pub fn anonymous() -> Self {
        Principal {
            subject: "anonymous".to_owned(),
            tenant: "default".to_owned(),
        }
    }
}

/// Why a principal cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TenantError {
    /// The principal names a tenant the configuration does not have.
    #[error("unknown tenant '{0}'")]
    Unknown(String),
}

/// The configured tenants and their credential sources.
#[derive(Debug, Clone)]
pub struct Tenants {
    tenants: HashMap<String, (TenantConfig, Arc<dyn CredentialSource>)>,
}

impl Tenants {
    /// Builds tenants from configuration: the `default` tenant reads the process
    /// environment; other tenants have no credentials until the credentials issue gives
    /// each its own store.
    pub fn from_config(config: &Config) -> Self {
        let tenants = config
            .tenants
            .iter()
            .map(|t| {
                let source: Arc<dyn CredentialSource> = if t.id == "default" {
                    Arc::new(ProcessEnv)
                } else {
                    Arc::new(crate::engine::StaticCredentials::default())
                };
                (t.id.clone(), (t.clone(), source))
            })
            .collect();
        Tenants { tenants }
    }

    /// The engine context for a principal's calls.
    pub fn context(&self, principal: &Principal) -> Result<ExecContext, TenantError> {
        let (config, credentials) = self
            .tenants
            .get(&principal.tenant)
            .ok_or_else(|| TenantError::Unknown(principal.tenant.clone()))?;
        Ok(ExecContext {
            tenant: config.id.clone(),
            principal: principal.subject.clone(),
            allowed_providers: config.allowed_providers.clone(),
            credentials: credentials.clone(),
        })
    }

    /// A tenant's mode.
    pub fn mode(&self, tenant: &str) -> Option<Mode> {
        self.tenants.get(tenant).map(|(c, _)| c.mode)
    }
}
