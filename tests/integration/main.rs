//! Integration tests, driven through the public API, the CLI and (for the MCP server) real
//! MCP clients against a mock upstream on 127.0.0.1 (and the real provider documents of `QUERYGATE_COMPAT_REGISTRY`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod admission;
mod audit_file;
mod audit_pg;
mod audit_pipeline;
mod auth;
mod bulk_priority;
mod cancel;
mod classes;
mod cli_pipeline;
mod compat;
mod config_cli;
mod corpus;
mod credentials;
mod database;
mod discovery;
mod drain;
mod errors;
mod eval_limits;
mod fanout_joins;
mod faults;
mod gate;
mod http_limits;
mod identity;
mod identity_isolation;
mod identity_tokens;
mod logs;
mod mcp_content;
mod mcp_http;
mod mcp_library;
mod mcp_python;
mod mcp_schemas;
mod mcp_stdio;
mod mcp_support;
mod mcp_tools;
mod mock;
mod mutations;
mod output_safety;
mod pagination;
mod projection;
mod provider_rules;
mod readme;
mod real_documents;
mod registry;
mod replicas;
mod retries;
mod select;
mod support;
mod telemetry;
mod transforms;
