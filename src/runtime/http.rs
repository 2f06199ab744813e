//! The HTTP server of `run --http-addr`: the web console (`/`, `/console/state`,
//! `/console/topology.svg`, see [`crate::runtime::console`]), metrics (`/metrics`), probes
//! (`/healthz`, `/ready`) and interactive queries (`/stores`, `/stores/<store>`, `/metadata`),
//! served by hyper on a
//! thread of its own (a current-thread tokio runtime; a store query, which waits for the tasks,
//! on tokio's blocking pool).
//!
//! It holds up to what an open port meets: at most [`MAX_CONNECTIONS`] connections at once, and
//! [`MAX_PER_PEER`] from one address (one more is closed as it comes, and refused file
//! descriptors only slow the accept loop down), a
//! request head read within [`HEAD_TIMEOUT`] (an idle keep-alive connection likewise) and at
//! most [`MAX_HEAD_BYTES`] long (else 431), a connection closed after [`CONNECTION_MAX`], and 400
//! for a request that does not parse. With `http.auth.token` every path but the probes and the
//! console's page wants
//! `Authorization: Bearer <token>` (else 401); with `http.tls.cert` and `http.tls.key` it speaks
//! HTTPS only.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::config::HttpConfig;
use crate::runtime::metrics::Metrics;

/// Connections served at once; one more is closed as soon as it is accepted.
pub const MAX_CONNECTIONS: usize = 128;
/// Connections served at once from one address, so that one client cannot take every slot
/// (Kubernetes' probes come from the node's address).
pub const MAX_PER_PEER: usize = 32;
/// How long a client may take to send a request head (and an idle connection may wait).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest request head (request line and headers) taken.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The longest a connection is kept, whatever it does.
pub const CONNECTION_MAX: Duration = Duration::from_secs(120);
/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How the server admits requests: a bearer token, TLS.
#[derive(Clone, Default)]
pub struct Access {
    token: Option<Arc<str>>,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Access {
    /// From the configuration's `http.*` settings: errors name the setting.
    pub fn from_config(c: &HttpConfig) -> Result<Access, String> {
        let token = c.token()?.map(Arc::from);
        let tls = match (&c.tls.cert, &c.tls.key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(tokio_rustls::TlsAcceptor::from(Arc::new(server_tls(cert, key)?))),
            _ => return Err("http.tls.cert and http.tls.key go together".into()),
        };
        Ok(Access { token, tls })
    }

    /// It serves HTTPS.
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }
}

fn server_tls(cert: &str, key: &str) -> Result<rustls::ServerConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("http.tls.cert {cert}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("http.tls.cert {cert}: no certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("http.tls.key {key}: {e}"))?;
    rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("http.tls.cert and http.tls.key: {e}"))
}

/// The running server: stopped (the port closed) when dropped.
pub struct Server {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    addr: Option<SocketAddr>,
}

impl Server {
    /// The address it listens on (the actual port when 0 was asked for).
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serve `metrics` on `addr` (`HOST:PORT`) until the returned server is dropped.
pub fn serve(addr: &str, metrics: Arc<Metrics>, access: Access) -> Result<Server, String> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| format!("--http-addr {addr}: cannot listen: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| format!("--http-addr {addr}: {e}"))?;
    let bound = listener.local_addr().ok();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the HTTP server's runtime: {e}"))?;
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("http".into())
        .spawn(move || {
            rt.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => accept_loop(l, metrics, access, stopped).await,
                    Err(e) => eprintln!("the HTTP server cannot start: {e}"),
                }
            });
            // Connections still open are dropped with the runtime.
            rt.shutdown_timeout(Duration::from_millis(100));
        })
        .map_err(|e| format!("cannot start the HTTP thread: {e}"))?;
    Ok(Server { stop: Some(stop), thread: Some(thread), addr: bound })
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    access: Access,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let peers: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>> = Arc::default();
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => return,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok((s, a)) => (s, a.ip()),
            // Out of file descriptors, say: the connections open go on; try again shortly.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(peer) = PeerSlot::take(&peers, peer) else {
            // Over its address's share: closed at once.
            drop(stream);
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Over the cap: closed at once (the client sees a reset, and retries later).
            drop(stream);
            continue;
        };
        let (metrics, access) = (metrics.clone(), access.clone());
        tokio::spawn(async move {
            let _slots = (slot, peer);
            let _ = tokio::time::timeout(CONNECTION_MAX, connection(stream, metrics, access)).await;
        });
    }
}

/// One of [`MAX_PER_PEER`] connections of an address, given back when dropped.
struct PeerSlot {
    peers: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
    ip: std::net::IpAddr,
}

impl PeerSlot {
    fn take(
        peers: &Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
        ip: std::net::IpAddr,
    ) -> Option<PeerSlot> {
        let mut m = peers.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= MAX_PER_PEER {
            return None;
        }
        *n += 1;
        Some(PeerSlot { peers: peers.clone(), ip })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut m = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

async fn connection(stream: tokio::net::TcpStream, metrics: Arc<Metrics>, access: Access) {
    let token = access.token.clone();
    let service = hyper::service::service_fn(move |req| {
        let (metrics, token) = (metrics.clone(), token.clone());
        async move { Ok::<_, Infallible>(handle(req, metrics, token.as_deref()).await) }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(HEAD_TIMEOUT).max_buf_size(MAX_HEAD_BYTES);
    match access.tls {
        None => {
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        }
        Some(tls) => {
            if let Ok(Ok(s)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                let _ = http.serve_connection(TokioIo::new(s), service).await;
            }
        }
    }
}

type Reply = Response<Full<Bytes>>;

async fn handle(req: Request<Incoming>, metrics: Arc<Metrics>, token: Option<&str>) -> Reply {
    let path = req.uri().path().to_string();
    let url = match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path.clone(),
    };
    // (The console's page holds no data: it asks for it with the token, which it takes from
    // the address a user opens, `/#token=…`.)
    let probe = matches!(path.as_str(), "/healthz" | "/ready" | "/");
    if let (Some(want), false) = (token, probe) {
        if !authorized(req.headers().get(AUTHORIZATION), want) {
            let mut r = reply(
                StatusCode::UNAUTHORIZED,
                "text/plain; charset=utf-8",
                "unauthorized: send Authorization: Bearer <http.auth.token>\n".into(),
            );
            r.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"streamc\""));
            return r;
        }
    }
    if req.method() == Method::GET && path == "/console/state" {
        // (On Kafka it asks the other instances: on the blocking pool, as a store query.)
        let answer = tokio::task::spawn_blocking(move || crate::runtime::metrics::console_state(&url, &metrics)).await;
        return match answer {
            Ok(body) => reply(StatusCode::OK, crate::runtime::metrics::JSON, body),
            Err(_) => {
                reply(StatusCode::INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", "the console failed\n".into())
            }
        };
    }
    if req.method() == Method::GET && (path.starts_with("/stores/") || path == "/metadata") {
        // A query waits for the tasks (and for other instances, or the cluster): on the
        // blocking pool, so that probes and scrapes are answered meanwhile.
        let answer = tokio::task::spawn_blocking(move || crate::runtime::metrics::store_query(&url, &metrics)).await;
        return match answer {
            Ok((code, body)) => reply(status(code), crate::runtime::metrics::JSON, body),
            Err(_) => {
                reply(StatusCode::INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", "the query failed\n".into())
            }
        };
    }
    let (code, ctype, body) = crate::runtime::metrics::respond(req.method() == Method::GET, &url, &metrics);
    reply(status(code), ctype, body)
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn reply(code: StatusCode, ctype: &'static str, body: String) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    r
}

/// Whether the `Authorization` header carries the bearer token `want` (compared in time
/// independent of where they differ).
fn authorized(header: Option<&HeaderValue>, want: &str) -> bool {
    let Some(got) = header.and_then(|h| h.as_bytes().strip_prefix(b"Bearer ")) else { return false };
    let want = want.as_bytes();
    if got.len() != want.len() {
        return false;
    }
    got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::runtime::metrics::TaskCounts;

    #[test]
    fn serves_get_metrics_and_stops_when_dropped() {
        use std::io::{Read, Write};
        let m = Arc::new(Metrics::new("app"));
        m.task("0_0", &[], None).publish(&TaskCounts { records_in: 3, ..Default::default() });
        let server = serve("127.0.0.1:0", m.clone(), Default::default()).unwrap();
        let addr = server.addr().unwrap();
        let get = |path: &str| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let ok = get("/metrics");
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains("text/plain; version=0.0.4"), "{ok}");
        assert!(ok.contains("streamc_records_in_total{application=\"app\",task=\"0_0\"} 3"), "{ok}");
        assert!(get("/nothing").starts_with("HTTP/1.1 404"));
        let page = get("/");
        assert!(page.starts_with("HTTP/1.1 200") && page.contains("text/html") && page.contains("streamc console"));
        assert!(get("/healthz").starts_with("HTTP/1.1 200"));
        let starting = get("/ready");
        assert!(starting.starts_with("HTTP/1.1 503") && starting.ends_with("not ready: starting\n"), "{starting}");
        m.health.set(Err("restoring 2 partitions"));
        assert!(get("/ready").ends_with("not ready: restoring 2 partitions\n"));
        assert!(get("/metrics").contains("streamc_ready{application=\"app\"} 0"));
        m.health.set(Ok(()));
        let ready = get("/ready");
        assert!(ready.starts_with("HTTP/1.1 200") && ready.ends_with("ready\n"), "{ready}");
        assert!(get("/metrics").contains("streamc_ready{application=\"app\"} 1"), "{}", get("/metrics"));
        let stop = Arc::new(AtomicBool::new(false));
        m.health.watch_stop(stop.clone());
        assert!(get("/ready").starts_with("HTTP/1.1 200"));
        stop.store(true, Ordering::SeqCst);
        assert!(get("/ready").starts_with("HTTP/1.1 503"));
        drop(server);
        // The accept loop has ended and closed the socket by the time the drop returns.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::net::TcpStream::connect(addr).is_ok() {
            assert!(std::time::Instant::now() < deadline, "the port is still open after the server was dropped");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[test]
    fn a_bad_address_is_an_error() {
        let m = Arc::new(Metrics::new("app"));
        let serve = |a: &str, m| super::serve(a, m, Access::default());
        let e = serve("not an address", m.clone()).err().unwrap();
        assert!(e.contains("--http-addr not an address"), "{e}");
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = serve(&taken.local_addr().unwrap().to_string(), m).err().unwrap();
        assert!(e.contains("cannot listen"), "{e}");
    }
}
