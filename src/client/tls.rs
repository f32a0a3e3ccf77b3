//! Support: skip it on first read — it is rustls set-up; step 01's requests go through it
//! unchanged.
//!
//! TLS for the client: rustls with the ring provider, trusting the CA the configuration names
//! and nothing else (or, when asked, nothing at all: `insecure-skip-tls-verify`).

use std::sync::Arc;

use crate::config::Config;

use super::ClientError;

/// rustls with the ring provider, trusting only the configured CAs (or nothing checked at all,
/// if and only if the kubeconfig says `insecure-skip-tls-verify`).
pub(super) fn tls_client_config(config: &Config) -> Result<rustls::ClientConfig, ClientError> {
    let failed = |what| move |source| ClientError::Tls { what, source };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(failed("no usable protocol versions"))?;
    let builder = if config.tls.insecure_skip_verify {
        tracing::warn!(
            server = %config.server,
            "TLS verification is OFF (insecure-skip-tls-verify): anyone between us and the server can read and change our traffic"
        );
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCertificate { provider }))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for certificate in &config.tls.root_certificates {
            roots
                .add(certificate.clone())
                .map_err(failed("the certificate authority is not usable"))?;
        }
        builder.with_root_certificates(roots)
    };
    match &config.auth.client_identity {
        Some(identity) => builder
            .with_client_auth_cert(identity.certificate_chain.clone(), identity.key.clone_key())
            .map_err(failed("the client certificate or key is not usable")),
        None => Ok(builder.with_no_client_auth()),
    }
}

/// Accepts any server certificate. Used only when the kubeconfig says
/// `insecure-skip-tls-verify: true`; handshake signatures are still checked, so the connection is
/// encrypted, but to whoever answers.
#[derive(Debug)]
struct AcceptAnyServerCertificate {
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for AcceptAnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
