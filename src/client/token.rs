//! The bearer token: none, given inline, or read from a file that the kubelet rotates (re-read
//! every minute, and at once after a 401).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::SecretString;

/// A file-backed token older than this is re-read before use. The kubelet refreshes projected
/// tokens well before they expire; client-go re-reads every minute too.
pub const TOKEN_REREAD_INTERVAL: Duration = Duration::from_secs(60);

/// Where the bearer token comes from, and the last good copy of a file-backed one.
pub(super) enum TokenState {
    None,
    Inline(SecretString),
    File {
        path: std::path::PathBuf,
        cache: Mutex<CachedToken>,
    },
}

pub(super) struct CachedToken {
    pub(super) token: Option<SecretString>,
    pub(super) read_at: Instant,
}

impl TokenState {
    /// The token to send now; a file-backed one is re-read when older than a minute.
    pub(super) fn current(&self) -> Option<SecretString> {
        match self {
            TokenState::None => None,
            TokenState::Inline(token) => Some(token.clone()),
            TokenState::File { path, cache } => {
                let mut cache = cache
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if cache.read_at.elapsed() >= TOKEN_REREAD_INTERVAL {
                    reread_token(path, &mut cache);
                }
                cache.token.clone()
            }
        }
    }

    /// After a 401: re-read now. True when the token is file-backed (a retry can help).
    pub(super) fn reload(&self) -> bool {
        match self {
            TokenState::File { path, cache } => {
                let mut cache = cache
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                reread_token(path, &mut cache);
                true
            }
            _ => false,
        }
    }
}

/// Read the token file; on failure keep the last good token (the kubelet may be mid-rewrite).
fn reread_token(path: &std::path::Path, cache: &mut CachedToken) {
    cache.read_at = Instant::now();
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => {
            cache.token = Some(SecretString::new(text.trim()));
        }
        Ok(_) => {
            tracing::warn!(path = %path.display(), "token file is empty; keeping the last token")
        }
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot re-read token file; keeping the last token")
        }
    }
}
