//! Tenants: who a request runs for, and the [`ExecContext`] the engine receives for it.
//!
//! The HTTP stage's auth layer puts a [`Principal`] in the request extensions (stdio runs as
//! a local principal); the tool-call stage turns it into an `ExecContext` here.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Config, Mode, TenantConfig};
use crate::engine::{CredentialStore, ExecContext};

pub use crate::auth::Principal;

/// Why a principal cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TenantError {
    /// The principal names a tenant the configuration does not have.
    #[error("unknown tenant '{0}'")]
    Unknown(String),
    /// A tenant's credential store could not be opened.
    #[error("tenant '{tenant}': {message}")]
    Credentials {
        /// The tenant.
        tenant: String,
        /// What failed, naming the file.
        message: String,
    },
}

/// The configured tenants and their credential stores.
#[derive(Debug, Clone)]
pub struct Tenants {
    tenants: HashMap<String, (TenantConfig, Arc<CredentialStore>)>,
}

impl Tenants {
    /// Opens every tenant's credential store: its env file (created empty with mode 0600
    /// when absent) and, for the tenant that opts in (`default` by default), the process
    /// environment. No tenant can read another's store.
    pub fn open(config: &Config) -> Result<Self, TenantError> {
        let mut tenants = HashMap::new();
        for tenant in &config.tenants {
            let store = match &tenant.env_file {
                Some(file) => CredentialStore::open(file, tenant.process_env).map_err(|err| {
                    TenantError::Credentials {
                        tenant: tenant.id.clone(),
                        message: err.message().to_owned(),
                    }
                })?,
                None if tenant.process_env => CredentialStore::process_env(),
                None => CredentialStore::empty(),
            }
            .with_aws_roles(tenant.aws_roles.clone())
            .with_token_exchanges(tenant.token_exchanges.clone());
            tenants.insert(tenant.id.clone(), (tenant.clone(), Arc::new(store)));
        }
        Ok(Tenants { tenants })
    }

    /// The engine context for a principal's calls.
    pub fn context(&self, principal: &Principal) -> Result<ExecContext, TenantError> {
        let (config, credentials) = self
            .tenants
            .get(&principal.tenant)
            .ok_or_else(|| TenantError::Unknown(principal.tenant.clone()))?;
        Ok(ExecContext {
            tenant: config.id.clone(),
            principal: principal.display_name(),
            allowed_providers: config.allowed_providers.clone(),
            credentials: credentials.clone(),
            slots: None,
            deadline: None,
            subject_token: principal.subject_token.clone(),
        })
    }

    /// Whether `principal` may call `tool`: the tenant's `allowed_tools` and the
    /// credential's scopes must both include it.
    pub fn allows_tool(&self, principal: &Principal, tool: &str) -> bool {
        self.tool_access(principal, tool) == ToolAccess::Allowed
    }

    /// What the tenant's `allowed_tools` and the credential's scopes say about `tool`.
    pub fn tool_access(&self, principal: &Principal, tool: &str) -> ToolAccess {
        let tenant_allows = self.tenants.get(&principal.tenant).is_some_and(|(c, _)| {
            c.allowed_tools
                .as_ref()
                .is_none_or(|tools| tools.contains(tool))
        });
        if !tenant_allows {
            ToolAccess::NotInTenantAllowlist
        } else if !principal.may_call(tool) {
            ToolAccess::NotInScopes
        } else {
            ToolAccess::Allowed
        }
    }

    /// A tenant's mode.
    pub fn mode(&self, tenant: &str) -> Option<Mode> {
        self.tenants.get(tenant).map(|(c, _)| c.mode)
    }

    /// A tenant's settings.
    pub fn config(&self, tenant: &str) -> Option<&TenantConfig> {
        self.tenants.get(tenant).map(|(c, _)| c)
    }
}

/// Whether a caller may use a tool at all (before any mode decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolAccess {
    /// Neither the tenant's `allowed_tools` nor the credential's scopes exclude it.
    Allowed,
    /// The tenant's `allowed_tools` does not name it.
    NotInTenantAllowlist,
    /// The credential's scopes do not grant it.
    NotInScopes,
}
