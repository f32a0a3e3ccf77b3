//! Support: skip it on first read — a request just carries the token this file keeps current.
//!
//! The bearer token: none, given inline, or read from a file that the kubelet rotates (re-read
//! every minute, and at once after a 401).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::ClientError;
use crate::config::{SecretString, TokenSource};

/// A file-backed token older than this is re-read before use. The kubelet refreshes projected
/// tokens well before they expire; client-go re-reads every minute too.
pub const TOKEN_REREAD_INTERVAL: Duration = Duration::from_secs(60);

/// The bearer token to send, and where a new one comes from.
pub(super) struct TokenState {
    /// The file a rotated token is read from; `None` for an inline token (or none at all).
    file: Option<PathBuf>,
    /// The last good token, and when the file was last read.
    cache: Mutex<(Option<SecretString>, Instant)>,
}

impl TokenState {
    /// The configured token; a file-backed one is read now, so a wrong path fails at start-up.
    pub(super) fn new(source: Option<&TokenSource>) -> Result<TokenState, ClientError> {
        let (file, token) = match source {
            None => (None, None),
            Some(TokenSource::Inline(token)) => (None, Some(token.clone())),
            Some(TokenSource::File(path)) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| ClientError::ReadTokenFile {
                        path: path.clone(),
                        source,
                    })?;
                (Some(path.clone()), Some(SecretString::new(text.trim())))
            }
        };
        let cache = Mutex::new((token, Instant::now()));
        Ok(TokenState { file, cache })
    }

    /// The token to send now; a file-backed one is re-read when older than a minute.
    pub(super) fn current(&self) -> Option<SecretString> {
        let mut cache = self.lock();
        if let Some(path) = &self.file {
            if cache.1.elapsed() >= TOKEN_REREAD_INTERVAL {
                reread_token(path, &mut cache);
            }
        }
        cache.0.clone()
    }

    /// After a 401: re-read now. True when the token is file-backed (a retry can help).
    pub(super) fn reload(&self) -> bool {
        let Some(path) = &self.file else {
            return false;
        };
        reread_token(path, &mut self.lock());
        true
    }

    fn lock(&self) -> MutexGuard<'_, (Option<SecretString>, Instant)> {
        self.cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Where the token comes from, never the token itself.
impl std::fmt::Debug for TokenState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.file, &self.lock().0) {
            (Some(path), _) => write!(f, "file {} <redacted>", path.display()),
            (None, Some(_)) => f.write_str("inline <redacted>"),
            (None, None) => f.write_str("none"),
        }
    }
}

/// Read the token file; on failure keep the last good token (the kubelet may be mid-rewrite).
fn reread_token(path: &Path, cache: &mut (Option<SecretString>, Instant)) {
    cache.1 = Instant::now();
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => {
            cache.0 = Some(SecretString::new(text.trim()));
        }
        Ok(_) => {
            tracing::warn!(path = %path.display(), "token file is empty; keeping the last token")
        }
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "cannot re-read token file; keeping the last token")
        }
    }
}
