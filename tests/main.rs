//! The integration suite: one binary, a module per topic. Every test talks real HTTP to a real
//! proxy on an ephemeral port, with the fake GitHub behind it. Security tests are named after
//! the attack they stop and assert the exact rejection and that no state changed.

// This whole binary is test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod crash;
mod support;

/// The stranger's suite (issue 15), against the real binary and in process while a real client
/// works: slow headers, tokenless bodies, connection floods, what anonymous traffic costs, the
/// session binding's side doors and how clients are shown.
mod abuse {
    mod anonymous;
    mod bodies;
    mod clients;
    mod connections;
    mod http2;
    mod rate_limits;
    mod sessions;
    mod support;
}

/// Audit trail, detection alerts, the webhook sink and `audit verify` (issue 6).
mod audit {
    mod detection;
    mod group_commit;
    mod support;
    mod trail;
    mod verify;
    mod webhook;
}

/// Metrics, health and the admin API on the admin listener, and the `admin` CLI.
mod admin {
    mod api;
    mod cli;
    mod metrics;
}

mod bindings {
    mod admission;
    mod audience;
    mod browser_state;
    mod consent_cookie;
    mod consent_registry;
    mod consent_scope;
    mod issuer;
    mod redirect;
}

/// Configured clients, Client ID Metadata Documents (and the SSRF-safe fetch), consent
/// warnings.
mod clients {
    mod budget;
    pub mod cimd;
    pub mod doc_server;
    mod preregistered;
    mod private_key_jwt;
    pub mod ssrf;
    mod warnings;
}

/// Connect links, refusals by protocol version, and token exchange (docs/DESIGN.md §5–7).
mod connect {
    mod exchange;
    mod freshness;
    mod links;
    mod refusals;
    mod revocation;
}

/// Several replicas on one PostgreSQL database (skipped with a notice without PostgreSQL,
/// required with `MCP_PG=require`), and the whole suite again on PostgreSQL.
mod replicas;

/// Registration policy, rate limits and client IPs, reaping and dedupe, application_type.
mod hygiene;

/// `[[policy]]`: deny, step-up and "ask the person" on every tool call (issue 19).
mod policy {
    mod argument_shapes;
    mod gate;
}

mod gateway {
    mod auth;
    mod folded_keys;
    mod hot_path;
    mod passthrough;
    mod sessions;
    mod streaming;
}

/// Real clients: the official MCP TypeScript SDK and headless Chromium (skipped with a notice
/// when Node or Chromium is missing, required when `MCP_E2E=require`, as in CI).
mod e2e {
    mod real_client;
}

/// Operations: TLS with certificate reload, graceful shutdown of the real binary, the demo's
/// ports, the deployment assets, traces.
mod ops {
    mod demo;
    mod deploy;
    mod edge;
    mod policy_reload;
    mod shutdown;
    mod telemetry;
    mod tls;
}

mod flows {
    mod account;
    mod branches;
    mod consent_form;
    mod dcr;
    mod form_action;
    mod github_app;
    mod happy_path;
    mod logs;
    mod metadata;
    mod refresh;
    mod token;
}
