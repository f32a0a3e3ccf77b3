//! Credentials the sandbox hands out cannot be computed from each other: service-account tokens
//! (TokenRequest, what `kubectl create token` sends) and the admin token of `--tls-dir` come
//! from the operating system's CSPRNG, not from the xorshift generator that names things.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test -p sandbox --test accounts credentials::`.
//! The attack checked: xorshift64*'s output is its state times an odd constant, so one 8-byte
//! chunk of a token gives the generator's state, and stepping it gives every later draw. When
//! tokens came from that generator, each token's signature predicted its next chunk and the
//! next token's signature; now none of them does.

use std::collections::HashSet;

use base64::Engine;
use serde_json::json;
use test_support::http_client::Http;

/// xorshift64*'s output multiplier, as the sandbox's `random.rs` uses it.
const MULTIPLIER: u64 = 0x2545_F491_4F6C_DD1D;

/// The inverse of an odd number modulo 2^64 (Newton's iteration doubles the correct bits).
fn inverse(odd: u64) -> u64 {
    let mut x = odd;
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(odd.wrapping_mul(x)));
    }
    x
}

/// The xorshift64* state that produced `output`, and the next `count` outputs it would give.
fn outputs_after(output: u64, count: usize) -> Vec<u64> {
    let mut state = output.wrapping_mul(inverse(MULTIPLIER));
    (0..count)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(MULTIPLIER)
        })
        .collect()
}

/// The signature (third part) of a JWT-shaped token, decoded.
fn signature(token: &str) -> Vec<u8> {
    let part = token.split('.').nth(2).expect("a JWT has three parts");
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .expect("the signature is base64url")
}

fn chunks(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// The recovery works: it does predict a xorshift64* sequence (so its failure below means
/// something).
#[test]
fn recovering_the_state_predicts_a_xorshift_sequence() {
    let mut state: u64 = 0x1234_5678_9abc_def1;
    let mut draw = || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(MULTIPLIER)
    };
    let first = draw();
    let next: Vec<u64> = (0..30).map(|_| draw()).collect();
    assert_eq!(outputs_after(first, 30), next);
}

/// 200 TokenRequests: all distinct, 256-bit signatures, and no 8-byte chunk of any token's
/// signature, read as xorshift64* output, predicts the rest of it or the next token.
#[tokio::test]
async fn no_token_predicts_another() {
    let sandbox = test_support::start_sandbox().await;
    let http = Http::new(&sandbox.url());
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                         "spec": {}});
    let mut tokens = Vec::new();
    for _ in 0..200 {
        let answer = http
            .create(
                "/api/v1/namespaces/default/serviceaccounts/default/token",
                &request,
            )
            .await;
        let token = answer.json()["status"]["token"]
            .as_str()
            .expect("status.token")
            .to_string();
        tokens.push(token);
    }
    let distinct: HashSet<&String> = tokens.iter().collect();
    assert_eq!(distinct.len(), tokens.len(), "every token is new");
    let signatures: Vec<Vec<u8>> = tokens.iter().map(|t| signature(t)).collect();
    assert!(
        signatures.iter().all(|s| s.len() == 32),
        "32-byte (256-bit) signatures"
    );
    let signature_set: HashSet<&Vec<u8>> = signatures.iter().collect();
    assert_eq!(signature_set.len(), signatures.len(), "signatures repeat");

    // The old layout drew 4 signature words, 20 key-id words and 2 jti words per token: the
    // next token's words were within 30 draws of any of this token's.
    let mut predicted_hits = 0;
    for pair in signatures.windows(2) {
        let later: HashSet<u64> = chunks(&pair[0])
            .into_iter()
            .skip(1)
            .chain(chunks(&pair[1]))
            .collect();
        for word in chunks(&pair[0]) {
            predicted_hits += outputs_after(word, 64)
                .iter()
                .filter(|w| later.contains(w))
                .count();
        }
    }
    assert_eq!(
        predicted_hits, 0,
        "a token's signature predicted later signature words"
    );

    // Spread: over 200 × 32 bytes every byte value turns up (an all-zero or low-entropy
    // source would not); 6,400 uniform draws miss a given value with probability ~1e-11.
    let seen: HashSet<u8> = signatures.iter().flatten().copied().collect();
    assert_eq!(seen.len(), 256, "signature bytes cover every value");
}

/// The admin token of a credentials directory is 64 hex digits (256 bits), and a rotation
/// gives an unrelated one.
#[tokio::test]
async fn admin_tokens_are_256_bit_and_new_on_rotation() {
    let (sandbox, dir) = test_support::start_tls_sandbox(Default::default()).await;
    let first = sandbox.token().expect("an admin token in TLS mode");
    let written = std::fs::read_to_string(dir.path().join("token")).expect("token file");
    assert_eq!(first, written);
    let mut seen = HashSet::new();
    for token in std::iter::once(first).chain((0..20).map(|_| sandbox.rotate_token())) {
        assert_eq!(token.len(), 64, "{token}");
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
        assert!(seen.insert(token.clone()), "token repeated: {token}");
    }
}
