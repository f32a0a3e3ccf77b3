//! Support: skip it on first read — a wrapper that keeps tokens out of logs.
//!
//! Secrets that must never reach a log: bearer tokens and client private keys. Both print
//! `<redacted>` under `Debug`, so a `?config` in a tracing line or a panic message is safe.
//!
//! WORKSHOP.md, "Set-up" ("Secrets stay secret"); `tests/client/config_sources.rs` proves it.

use std::fmt;
use std::sync::Arc;

use rustls_pki_types::PrivateKeyDer;

/// A string that `Debug` prints as `SecretString(<redacted>)` (it has no `Display`): bearer tokens.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(secret: impl Into<String>) -> SecretString {
        SecretString(secret.into())
    }

    /// The secret itself: only for the `Authorization` header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretString(<redacted>)")
    }
}

/// A client private key that `Debug` never prints.
#[derive(Clone)]
pub struct SecretKey(Arc<PrivateKeyDer<'static>>);

impl SecretKey {
    pub fn new(key: PrivateKeyDer<'static>) -> SecretKey {
        SecretKey(Arc::new(key))
    }

    /// A copy of the key for rustls' `with_client_auth_cert`.
    pub fn clone_key(&self) -> PrivateKeyDer<'static> {
        self.0.clone_key()
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(<redacted>)")
    }
}
