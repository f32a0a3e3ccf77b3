//! Service-account tokens: what TokenRequest (`kubectl create token`) and the kubelet's
//! projected `token` file hand out, and how a presented token is looked up again.
//!
//! WORKSHOP.md, "Set-up: the sandbox". A token is shaped like kube-apiserver's: a JWT
//! `base64url(header).base64url(claims).base64url(signature)` with the claims kube writes
//! (`iss`, `sub`, `aud`, `exp`, `iat`, `nbf`, `jti`, `kubernetes.io: {namespace,
//! serviceaccount, pod}`), so a learner can paste it into any JWT decoder. Where it
//! simplifies: the signature is 32 random bytes (from the OS CSPRNG, as are the key id and
//! `jti`, so no token can be computed from another) this registry remembers, not an RS256
//! signature — the sandbox verifies a token by looking it up, never by cryptography, and a
//! restarted sandbox has forgotten every token (as a real cluster would with a new signing key).
//! Whether the service account (and bound pod) still exist is the caller's check.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use serde_json::json;

use crate::random::{self, NoRandomness};

/// kube-apiserver's default issuer and audience (`--service-account-issuer`, `--api-audiences`).
pub(crate) const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// TokenRequest's `expirationSeconds` default (one hour) and minimum (ten minutes).
pub(crate) const DEFAULT_EXPIRATION_SECONDS: u64 = 3600;
pub(crate) const MIN_EXPIRATION_SECONDS: u64 = 600;

/// The kubelet asks for 3607 s; kube-apiserver (`--service-account-extend-token-expiration`,
/// on by default) turns such tokens into one-year ones, and so does the sandbox.
pub(crate) const KUBELET_TOKEN_SECONDS: u64 = 365 * 24 * 3600;

/// The signature part of a token: 256 bits, what guessing a token would have to find.
pub(crate) const SIGNATURE_BYTES: usize = 32;

/// Tokens are kept until they expire; past this many, the oldest-expiring go first.
const MAX_TOKENS: usize = 100_000;

/// Whom a token was issued to: the service account and, for a bound token, the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TokenClaims {
    pub(crate) namespace: String,
    pub(crate) service_account: String,
    pub(crate) service_account_uid: String,
    /// (name, uid) of the pod a bound token was issued for.
    pub(crate) pod: Option<(String, String)>,
    pub(crate) audiences: Vec<String>,
    /// Seconds since the Unix epoch.
    pub(crate) issued_at: u64,
    pub(crate) expires_at: u64,
}

impl TokenClaims {
    /// `system:serviceaccount:<namespace>:<name>`, the user name kube-apiserver derives.
    pub(crate) fn user_name(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.namespace, self.service_account
        )
    }
}

/// Every token issued and not yet expired.
pub(crate) struct Tokens {
    issued: Mutex<HashMap<String, TokenClaims>>,
}

pub(crate) fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

impl Tokens {
    pub(crate) fn new() -> Tokens {
        Tokens {
            issued: Mutex::new(HashMap::new()),
        }
    }

    /// A new JWT-shaped token carrying `claims`; remembered until it expires.
    pub(crate) fn issue(&self, claims: TokenClaims) -> Result<String, NoRandomness> {
        let signature = random::secret_bytes::<SIGNATURE_BYTES>()?;
        let key_id = random::secret_hex::<20>()?;
        let jti = random::secret_uuid()?;
        let mut kubernetes = json!({
            "namespace": claims.namespace,
            "serviceaccount": {"name": claims.service_account, "uid": claims.service_account_uid},
        });
        if let Some((name, uid)) = &claims.pod {
            kubernetes["pod"] = json!({"name": name, "uid": uid});
            kubernetes["node"] = json!({"name": "sandbox-node"});
        }
        let header = json!({"alg": "RS256", "kid": key_id});
        let body = json!({
            "aud": claims.audiences,
            "exp": claims.expires_at,
            "iat": claims.issued_at,
            "iss": ISSUER,
            "jti": jti,
            "kubernetes.io": kubernetes,
            "nbf": claims.issued_at,
            "sub": claims.user_name(),
        });
        let encode = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let token = format!(
            "{}.{}.{}",
            encode(header.to_string().as_bytes()),
            encode(body.to_string().as_bytes()),
            encode(&signature)
        );
        let mut issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        let now = now_seconds();
        issued.retain(|_, c| c.expires_at > now);
        if issued.len() >= MAX_TOKENS {
            let soonest = issued
                .iter()
                .min_by_key(|(_, c)| c.expires_at)
                .map(|(t, _)| t.clone());
            if let Some(soonest) = soonest {
                issued.remove(&soonest);
            }
        }
        issued.insert(token.clone(), claims);
        Ok(token)
    }

    /// The claims of a token this registry issued and that has not expired at `now`.
    pub(crate) fn lookup(&self, token: &str, now: u64) -> Option<TokenClaims> {
        let issued = self.issued.lock().unwrap_or_else(|p| p.into_inner());
        issued.get(token).filter(|c| c.expires_at > now).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(expires_at: u64) -> TokenClaims {
        TokenClaims {
            namespace: "ns".into(),
            service_account: "sa".into(),
            service_account_uid: "u1".into(),
            pod: Some(("p".into(), "u2".into())),
            audiences: vec![ISSUER.into()],
            issued_at: 100,
            expires_at,
        }
    }

    /// A token decodes as a JWT with kube's claims, and is found again until it expires.
    #[test]
    fn tokens_are_jwt_shaped_and_found_until_they_expire() {
        let tokens = Tokens::new();
        let token = tokens
            .issue(claims(now_seconds() + 600))
            .expect("OS randomness");
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let body = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(parts[1])
            .expect("base64url");
        let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON claims");
        assert_eq!(body["sub"], "system:serviceaccount:ns:sa");
        assert_eq!(body["kubernetes.io"]["pod"]["uid"], "u2");
        assert_eq!(body["kubernetes.io"]["serviceaccount"]["name"], "sa");
        assert_eq!(body["iss"], ISSUER);
        let now = now_seconds();
        assert_eq!(
            tokens.lookup(&token, now),
            Some(claims(now + 600)).map(|mut c| {
                c.expires_at = body["exp"].as_u64().unwrap_or_default();
                c
            })
        );
        assert_eq!(tokens.lookup(&token, now + 601), None, "expired");
    }

    /// Garbage, a forged signature and a token of another sandbox are all unknown.
    #[test]
    fn unknown_tokens_are_not_found() {
        let tokens = Tokens::new();
        let token = tokens
            .issue(claims(now_seconds() + 600))
            .expect("OS randomness");
        let now = now_seconds();
        for presented in ["", "garbage", "a.b.c", &format!("{token}x"), &token[1..]] {
            assert_eq!(tokens.lookup(presented, now), None, "{presented}");
        }
        assert!(Tokens::new().lookup(&token, now).is_none());
    }
}
