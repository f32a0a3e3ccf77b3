//! The sandbox's certificates and, when started with a credentials directory, its admin token:
//! a freshly generated CA, a serving certificate for 127.0.0.1/localhost (and the names
//! in-cluster clients use) signed by it, and a bearer token — written to
//! `ca.crt`, `token` and `namespace` exactly as a pod's service-account directory
//! (`/var/run/secrets/kubernetes.io/serviceaccount/`), so the in-cluster code path can be tested.
//!
//! WORKSHOP.md, "Set-up: the sandbox" (and "How a binary finds its API server"). With a data
//! directory, the CA's key and certificate and the admin token are kept there (`ca.key`,
//! `ca.crt`, `admin-token`, 0600): a sandbox restarted on it (after a `kill -9`, a power cut)
//! comes back as the same server, and a client that trusted it and held its token goes on.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::options::SandboxError;
use crate::random;
use crate::sync::lock;

/// The CA and the serving certificate signed by it: generated in memory for every sandbox, so
/// pods can speak HTTPS to it even when the learner's kubectl speaks plain HTTP (`server.rs`
/// tells the two apart by the first byte of a connection).
pub(crate) struct Certificates {
    pub(crate) tls_config: Arc<rustls::ServerConfig>,
    /// The CA in PEM: `ca.crt` of the credentials directory, of the `kube-root-ca.crt`
    /// ConfigMap in every namespace and of every pod's service-account volume.
    pub(crate) ca_pem: String,
}

/// In a data directory: the CA's private key, its certificate, and the admin's token.
const CA_KEY_FILE: &str = "ca.key";
const CA_CERT_FILE: &str = "ca.crt";
const ADMIN_TOKEN_FILE: &str = "admin-token";

/// `dir/name`'s text, if the file is there.
fn read_kept(dir: &Path, name: &str) -> Result<Option<String>, SandboxError> {
    let path = dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SandboxError::ReadKept { path, source }),
    }
}

impl Certificates {
    /// A serving certificate for `listen` and every name a client may use, signed by the CA
    /// kept in `data_dir` (made and kept there the first time), or by a new one.
    pub(crate) fn generate(
        listen: IpAddr,
        data_dir: Option<&Path>,
    ) -> Result<Certificates, SandboxError> {
        let kept = match data_dir {
            Some(dir) => read_kept(dir, CA_KEY_FILE)?.zip(read_kept(dir, CA_CERT_FILE)?),
            None => None,
        };
        let ca_key = match &kept {
            Some((key, _)) => KeyPair::from_pem(key).map_err(SandboxError::Certificates)?,
            None => KeyPair::generate().map_err(SandboxError::Certificates)?,
        };
        let mut ca_params =
            CertificateParams::new(Vec::<String>::new()).map_err(SandboxError::Certificates)?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "sandbox-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        // A kept CA signs as it did: same name, same key, so its kept certificate verifies
        // what it signs now.
        let ca_pem = match kept {
            Some((_, cert)) => cert,
            None => {
                let cert = ca_params
                    .self_signed(&ca_key)
                    .map_err(SandboxError::Certificates)?
                    .pem();
                if let Some(dir) = data_dir {
                    std::fs::create_dir_all(dir).map_err(|source| {
                        SandboxError::WriteCredentials {
                            path: dir.to_path_buf(),
                            source,
                        }
                    })?;
                    write_atomically(&dir.join(CA_KEY_FILE), ca_key.serialize_pem().as_bytes())?;
                    write_atomically(&dir.join(CA_CERT_FILE), cert.as_bytes())?;
                }
                cert
            }
        };
        let issuer = Issuer::new(ca_params, ca_key);

        // Clients connect to https://127.0.0.1:PORT, so the certificate needs an IP address SAN;
        // a DNS SAN "127.0.0.1" would not match (in-cluster configs use the service IP the same
        // way). The kubernetes.default.* names are those kube-apiserver's certificate carries
        // for in-cluster clients that use the Service's DNS name.
        let mut names: Vec<String> = [
            "127.0.0.1",
            "::1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ]
        .map(String::from)
        .to_vec();
        if !listen.is_loopback() && !listen.is_unspecified() {
            names.push(listen.to_string());
        }
        let server_key = KeyPair::generate().map_err(SandboxError::Certificates)?;
        let mut server_params =
            CertificateParams::new(names).map_err(SandboxError::Certificates)?;
        server_params
            .distinguished_name
            .push(DnType::CommonName, "sandbox-apiserver");
        let server_cert = server_params
            .signed_by(&server_key, &issuer)
            .map_err(SandboxError::Certificates)?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(SandboxError::TlsConfig)?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(server_cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
            )
            .map_err(SandboxError::TlsConfig)?;
        // The sandbox speaks HTTP/1.1 only; advertising h2 would make clients try it.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Certificates {
            tls_config: Arc::new(config),
            ca_pem,
        })
    }
}

/// A sandbox started with a credentials directory: HTTPS only, and the admin's bearer token.
pub(crate) struct Security {
    token: Mutex<String>,
    dir: PathBuf,
    /// Where the token is kept across restarts: `admin-token` in the data directory.
    kept: Option<PathBuf>,
}

impl Security {
    /// Generate the first token (or take the one kept in `data_dir`, keeping a new one there),
    /// and write `ca.crt`, `token` and `namespace` into `dir`.
    pub(crate) fn generate(
        dir: &Path,
        certificates: &Certificates,
        data_dir: Option<&Path>,
    ) -> Result<Security, SandboxError> {
        create_private_dir(dir).map_err(|source| SandboxError::WriteCredentials {
            path: dir.to_path_buf(),
            source,
        })?;
        let kept = match data_dir {
            Some(data_dir) => read_kept(data_dir, ADMIN_TOKEN_FILE)?,
            None => None,
        };
        let token = match kept.map(|t| t.trim().to_string()).filter(|t| !t.is_empty()) {
            Some(token) => token,
            None => {
                let token = admin_token()?;
                if let Some(data_dir) = data_dir {
                    write_atomically(&data_dir.join(ADMIN_TOKEN_FILE), token.as_bytes())?;
                }
                token
            }
        };
        write_atomically(&dir.join("ca.crt"), certificates.ca_pem.as_bytes())?;
        write_atomically(&dir.join("namespace"), b"default")?;
        write_atomically(&dir.join("token"), token.as_bytes())?;
        Ok(Security {
            token: Mutex::new(token),
            dir: dir.to_path_buf(),
            kept: data_dir.map(|d| d.join(ADMIN_TOKEN_FILE)),
        })
    }

    pub(crate) fn current_token(&self) -> String {
        lock(&self.token).clone()
    }

    /// Is `presented` (the bearer token, without `Bearer `) the admin's current token?
    pub(crate) fn is_admin_token(&self, presented: &str) -> bool {
        let current = lock(&self.token);
        // Constant-time comparison: a token check should not leak how many bytes matched.
        presented.len() == current.len()
            && presented
                .bytes()
                .zip(current.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    /// A new token; the old one is refused from now on. The file is replaced atomically (write a
    /// temporary file, then rename), as the kubelet does when it refreshes a projected token.
    /// Should the OS have no randomness to give, the old token stays (and that is logged).
    pub(crate) fn rotate_token(&self) -> String {
        let token = match admin_token() {
            Ok(token) => token,
            Err(error) => {
                tracing::error!(%error, "cannot rotate the admin token; the old one stays");
                return self.current_token();
            }
        };
        *lock(&self.token) = token.clone();
        let files = std::iter::once(self.dir.join("token")).chain(self.kept.clone());
        for file in files {
            if let Err(error) = write_atomically(&file, token.as_bytes()) {
                tracing::warn!(%error, "could not rewrite the token file");
            }
        }
        token
    }
}

/// The admin's bearer token: 32 bytes of the OS CSPRNG as 64 hex digits.
fn admin_token() -> Result<String, SandboxError> {
    random::secret_hex::<32>().map_err(|_| SandboxError::Randomness)
}

/// The credentials directory, readable by its owner only (0700), like the kubelet's
/// service-account token directories. An existing directory is tightened to 0700 too.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Write `path` as a whole, readable by its owner only (0600): into a new `*.tmp` file beside
/// it, then renamed over it. The temporary file is created with O_CREAT|O_EXCL
/// (`create_new`), which fails on anything already there — a planted symlink included — so
/// the token is never written through a link to somewhere else; a stale one is removed (the
/// link itself, not its target) and creation tried once more.
fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), SandboxError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let temporary = path.with_extension("tmp");
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temporary)
    };
    let result = create()
        .or_else(|error| {
            if error.kind() == std::io::ErrorKind::AlreadyExists {
                std::fs::remove_file(&temporary)?;
                create()
            } else {
                Err(error)
            }
        })
        .and_then(|mut file| file.write_all(contents).and_then(|()| file.sync_all()))
        .and_then(|()| std::fs::rename(&temporary, path));
    result.map_err(|source| SandboxError::WriteCredentials {
        path: path.to_path_buf(),
        source,
    })
}
