//! One scriptable HTTP server for the tests that need a server dumber than the sandbox: each test
//! decides what every request gets, so a test can say "the third request gets a 503" or "this
//! watch sends these bytes in 1-byte chunks, then stays open". Plain HTTP or HTTPS with a freshly
//! generated CA ([`TestPki`], optionally requiring a client certificate), bound to 127.0.0.1:0.
//!
//! Bodies are whole ([`json`], [`status`], [`raw`]), cut into chosen HTTP chunks ([`chunked`]:
//! each piece is one chunk on the wire), or never end ([`endless`], [`lines_then_quiet`]); a
//! request can also go unanswered ([`never()`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub user_agent: Option<String>,
    pub accept: Option<String>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// What the server answers with: a whole body, or one that never ends.
pub type Body = BoxBody<Bytes, Infallible>;
pub type Reply = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;
type Handler = Arc<dyn Fn(Recorded, usize) -> Reply + Send + Sync>;

/// A running fake server; stops when dropped.
pub struct ScriptedServer {
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    connections: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedServer {
    /// Plain HTTP. `handler(request, index)` answers; `index` counts requests from 0.
    pub async fn http(
        handler: impl Fn(Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> ScriptedServer {
        ScriptedServer::start(None, Arc::new(handler)).await
    }

    /// Plain HTTP giving every request the same answer, made afresh by `answer`.
    pub async fn always(
        answer: impl Fn() -> Response<Body> + Send + Sync + 'static,
    ) -> ScriptedServer {
        ScriptedServer::http(move |_, _| ready(answer())).await
    }

    /// Plain HTTP that reads every request and never answers (a hung server or proxy).
    pub async fn silent() -> ScriptedServer {
        ScriptedServer::http(|_, _| never()).await
    }

    /// HTTPS with the given server configuration (see [`TestPki`]).
    pub async fn https(
        tls: Arc<rustls::ServerConfig>,
        handler: impl Fn(Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> ScriptedServer {
        ScriptedServer::start(Some(tls), Arc::new(handler)).await
    }

    async fn start(tls: Option<Arc<rustls::ServerConfig>>, handler: Handler) -> ScriptedServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accepted = connections.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let handler = handler.clone();
                let recorded = recorded.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: Request<hyper::body::Incoming>| {
                            let handler = handler.clone();
                            let recorded = recorded.clone();
                            async move {
                                let header = |name: &str| {
                                    request
                                        .headers()
                                        .get(name)
                                        .and_then(|v| v.to_str().ok())
                                        .map(str::to_string)
                                };
                                let mut seen = Recorded {
                                    method: request.method().to_string(),
                                    path: request
                                        .uri()
                                        .path_and_query()
                                        .map(|p| p.to_string())
                                        .unwrap_or_default(),
                                    authorization: header("authorization"),
                                    user_agent: header("user-agent"),
                                    accept: header("accept"),
                                    content_type: header("content-type"),
                                    body: Vec::new(),
                                };
                                seen.body = request
                                    .into_body()
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes().to_vec())
                                    .unwrap_or_default();
                                let index = {
                                    let mut all = recorded.lock().unwrap();
                                    all.push(seen.clone());
                                    all.len() - 1
                                };
                                Ok::<_, Infallible>(handler(seen, index).await)
                            }
                        },
                    );
                    let builder = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(stream).await {
                                let _ = builder
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await;
                            }
                        }
                        None => {
                            let _ = builder
                                .serve_connection(TokioIo::new(stream), service)
                                .await;
                        }
                    }
                });
            }
        });
        ScriptedServer {
            url: format!("{scheme}://{addr}"),
            requests,
            connections,
            task,
        }
    }

    /// How many TCP connections were accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// The path and query of every request so far, in order.
    pub fn paths(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .map(|request| request.path.clone())
            .collect()
    }
}

/// An answer, ready now.
pub fn ready(response: Response<Body>) -> Reply {
    Box::pin(async move { response })
}

fn whole(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A JSON body with this code.
pub fn json(code: u16, body: serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(whole(body.to_string()))
        .unwrap()
}

/// A Kubernetes Failure `Status` body, as the API server writes errors.
pub fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    json(
        code,
        serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code,
        }),
    )
}

/// Any body and content type.
pub fn raw(code: u16, content_type: &str, body: &str) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", content_type)
        .body(whole(body.to_string()))
        .unwrap()
}

/// A JSON response whose body never ends (chunked, no Content-Length): `{"items":[` and then
/// 64 KiB chunks of spaces for as long as the client reads. What a broken or hostile server does.
pub fn endless(code: u16) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Frames(endless_chunks()).boxed())
        .unwrap()
}

/// A body whose every frame `next` decides: `Ready(Some(bytes))` is one chunk, `Ready(None)` the
/// end, and `Pending` silence from then on (the body is never woken again, so the connection
/// stays open until the client or the test ends it).
struct Frames<F>(F);

impl<F> hyper::body::Body for Frames<F>
where
    F: FnMut() -> Poll<Option<Bytes>> + Unpin,
{
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        (self.0)().map(|chunk| chunk.map(|chunk| Ok(Frame::data(chunk))))
    }
}

/// `{"items":[`, then 64 KiB of spaces at every call.
fn endless_chunks() -> impl FnMut() -> Poll<Option<Bytes>> + Send + Sync + Unpin + 'static {
    const CHUNK: &[u8] = &[b' '; 64 * 1024];
    let mut started = false;
    move || {
        let chunk = if started {
            Bytes::from_static(CHUNK)
        } else {
            started = true;
            Bytes::from_static(br#"{"items":["#)
        };
        Poll::Ready(Some(chunk))
    }
}

/// A CA, a server certificate for 127.0.0.1 signed by it, and a client certificate signed by it.
pub struct TestPki {
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

impl TestPki {
    pub fn generate() -> TestPki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();

        let server_key = rcgen::KeyPair::generate().unwrap();
        let server_params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])
                .unwrap();
        let server_cert = server_params.signed_by(&server_key, &ca).unwrap();

        let client_key = rcgen::KeyPair::generate().unwrap();
        let mut client_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        client_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "workshop-admin");
        client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client_params.signed_by(&client_key, &ca).unwrap();

        TestPki {
            ca_pem: ca.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        }
    }

    /// The server side; with `require_client_certificate`, a handshake without one fails.
    pub fn server_config(&self, require_client_certificate: bool) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if require_client_certificate {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(self.ca_pem.as_bytes()).unwrap())
                .unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let chain = vec![CertificateDer::from_pem_slice(self.server_cert_pem.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(self.server_key_pem.as_bytes()).unwrap();
        Arc::new(builder.with_single_cert(chain, key).unwrap())
    }
}

/// An answer that never comes: the request is read and left hanging (a hung server or proxy).
pub fn never() -> Reply {
    Box::pin(std::future::pending())
}

/// A 200 JSON response in chunked transfer encoding: each element of `chunks` is one HTTP chunk
/// (flushed on its own), then the terminating chunk, unless `hold_open`: then the body stays
/// open and silent, as a quiet watch does, until the client or the test ends it.
pub fn chunked(chunks: Vec<Bytes>, hold_open: bool) -> Response<Body> {
    let mut chunks = std::collections::VecDeque::from(chunks);
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(
            Frames(move || match chunks.pop_front() {
                Some(chunk) => Poll::Ready(Some(chunk)),
                None if hold_open => Poll::Pending,
                None => Poll::Ready(None),
            })
            .boxed(),
        )
        .unwrap()
}

/// A watch response: these lines (each a JSON event), then a body that stays open and sends
/// nothing more, as a quiet watch does until its timeout.
pub fn lines_then_quiet(lines: Vec<String>) -> Response<Body> {
    chunked(
        lines
            .into_iter()
            .map(|line| Bytes::from(format!("{line}\n")))
            .collect(),
        true,
    )
}
