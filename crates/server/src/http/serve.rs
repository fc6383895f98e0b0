//! The accept loop and each connection's life: at most `max_connections` at
//! once (a waiting connection makes the one idle longest close), TLS when
//! configured, HTTP/1.1 with header limits, and the header read, idle and
//! request timeouts. Each connection uses the web config current when it
//! was accepted. On shutdown it stops accepting, lets requests in
//! progress finish (within `SHUTDOWN_GRACE`) and closes the rest.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower::ServiceExt;

use crate::config::ServerConfig;
use crate::http::conn_activity::{Activity, Phase, Registry, Timeouts, Watched};
use crate::http::limits;
use crate::http::web_config::WebConfig;
use crate::http::web_config_reload::WebConfigSource;

struct Shared {
    router: Router,
    web: WebConfigSource,
    http: http1::Builder,
    timeouts: Timeouts,
    max_uri_bytes: usize,
    registry: Arc<Registry>,
}

/// Longest wait for requests in progress when stopping.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until `shutdown` resolves, then drains.
pub async fn run(
    listener: TcpListener,
    router: Router,
    config: &ServerConfig,
    web: WebConfigSource,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = http1::Builder::new();
    http.header_read_timeout(None)
        .max_headers(config.max_headers)
        .max_header_size(config.max_header_bytes)
        .keep_alive(true);
    let timeouts = Timeouts {
        header_read: config.header_read_timeout,
        idle: config.idle_timeout,
        request: config.request_timeout,
    };
    let shared = Arc::new(Shared {
        router,
        web,
        http,
        timeouts,
        max_uri_bytes: config.max_uri_bytes,
        registry: Arc::default(),
    });
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!("cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let slot = tokio::select! {
            slot = take_slot(&slots, &shared.registry) => slot,
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        tracing::trace!(%peer, "connection accepted");
        tokio::spawn(connection(
            stream,
            peer,
            shared.clone(),
            slot,
            stop_rx.clone(),
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every slot back means every connection is closed. A stop waits at most
    // SHUTDOWN_GRACE (or the request timeout, if shorter) for requests in
    // progress: answers take milliseconds, and systemd's stop timeout must not
    // run out first.
    let grace = config.request_timeout.min(SHUTDOWN_GRACE) + Duration::from_secs(1);
    let all = u32::try_from(config.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(grace, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {grace:?}; closing them");
    }
}

/// A connection slot; when all are taken, closes the connection waiting
/// longest without a request in progress and tries again.
async fn take_slot(slots: &Arc<Semaphore>, registry: &Registry) -> OwnedSemaphorePermit {
    loop {
        if let Ok(slot) = slots.clone().try_acquire_owned() {
            return slot;
        }
        registry.evict_longest_waiting();
        if let Ok(Ok(slot)) =
            tokio::time::timeout(Duration::from_millis(50), slots.clone().acquire_owned()).await
        {
            return slot;
        }
    }
}

/// Who sent a request, for the routes that answer only some clients.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// The client connected from this host's loopback.
    pub loopback: bool,
    /// The web config authenticated it (basic auth, or a client
    /// certificate every client must show).
    pub authenticated: bool,
}

impl Caller {
    fn new(peer: SocketAddr, web: &WebConfig) -> Caller {
        let ip = peer.ip().to_canonical();
        Caller {
            loopback: ip.is_loopback(),
            authenticated: web.auth.is_some() || web.client_certs_required,
        }
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    _slot: OwnedSemaphorePermit,
    stop: watch::Receiver<bool>,
) {
    let entry = shared.registry.add();
    let activity = entry.activity.clone();
    let web = shared.web.current();
    let caller = Caller::new(peer, &web);
    match web.tls.clone() {
        None => drive(stream, caller, shared, web, activity, stop).await,
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls);
            let handshake = async {
                if plain_http(&stream).await {
                    let mut stream = stream;
                    let _ = stream.write_all(PLAIN_HTTP_ANSWER).await;
                    let _ = stream.shutdown().await;
                    return None;
                }
                match acceptor.accept(stream).await {
                    Ok(tls) => Some(tls),
                    Err(e) => {
                        tracing::debug!("TLS handshake failed: {e}");
                        None
                    }
                }
            };
            let mut stopping = stop.clone();
            let tls = tokio::select! {
                tls = tokio::time::timeout(shared.timeouts.header_read, handshake) => tls,
                () = evicted(&activity) => return,
                _ = stopping.wait_for(|stop| *stop) => return,
            };
            if let Ok(Some(tls)) = tls {
                drive(tls, caller, shared, web, activity, stop).await;
            }
        }
    }
}

const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
Connection: close\r\nContent-Length: 48\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// Whether the client opened with plain HTTP rather than a TLS handshake
/// (whose first byte is 0x16).
async fn plain_http(stream: &TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(stream.peek(&mut first).await, Ok(1) if first[0].is_ascii_uppercase())
}

async fn evicted(activity: &Activity) {
    while activity.phase() != Phase::Evicted {
        activity.changed().await;
    }
}

async fn drive<I>(
    io: I,
    caller: Caller,
    shared: Arc<Shared>,
    web: Arc<WebConfig>,
    activity: Arc<Activity>,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(Watched::new(io, activity.clone()));
    let service = {
        let (shared, web, activity) = (shared.clone(), web, activity.clone());
        service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(caller);
            handle(req, shared.clone(), web.clone(), activity.clone())
        })
    };
    let conn = shared.http.serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = *stop.borrow();
    loop {
        let (phase, deadline, write_blocked) = activity.deadline(&shared.timeouts);
        if stopping && phase != Phase::Busy {
            return;
        }
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!("connection ended: {e}");
                }
                return;
            }
            () = activity.changed() => {}
            () = tokio::time::sleep_until(deadline) => {
                tracing::debug!(?phase, write_blocked, "connection timed out; closing it");
                return;
            }
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    web: Arc<WebConfig>,
    activity: Arc<Activity>,
) -> Result<Response<Body>, Infallible> {
    let busy = activity.begin();
    let mut response = respond(req, &shared, &web).await;
    for (name, value) in &web.headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    // The request stays busy until its body has been handed to the connection.
    Ok(response.map(|body| {
        Body::new(body.map_frame(move |frame| {
            let _ = &busy;
            frame
        }))
    }))
}

async fn respond(req: Request<Incoming>, shared: &Shared, web: &WebConfig) -> Response<Body> {
    if let Some(refused) = limits::check(&req, shared.max_uri_bytes) {
        return refused;
    }
    if let Some(auth) = &web.auth
        && let Err(refused) = auth.check(req.headers()).await
    {
        return refused;
    }
    match shared.router.clone().oneshot(req).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}
