//! One `List` call to the kubelet's PodResources service: a fresh HTTP/2
//! connection on its unix socket, each step under the timeout, the answer
//! refused past `max_bytes`.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::PathAndQuery;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::proto::{LIST, ListPodResourcesRequest, ListPodResourcesResponse};

/// The limits of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallLimits {
    /// For connecting, and again for the call itself.
    pub timeout: Duration,
    /// Largest answer decoded.
    pub max_bytes: usize,
}

/// hyper's HTTP/2 sender as the service tonic's client calls.
struct Http2(SendRequest<tonic::body::Body>);

type Responding = Pin<Box<dyn Future<Output = hyper::Result<http::Response<Incoming>>> + Send>>;

impl tower_service::Service<http::Request<tonic::body::Body>> for Http2 {
    type Response = http::Response<Incoming>;
    type Error = hyper::Error;
    type Future = Responding;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

/// Asks `socket` for every pod's resources. The error says, in words, which
/// step failed.
pub async fn list(socket: &Path, limits: &CallLimits) -> Result<ListPodResourcesResponse, String> {
    let timeout = limits.timeout;
    let within = |what: &'static str| move |_| format!("{what} took longer than {timeout:?}");
    let stream = tokio::time::timeout(timeout, tokio::net::UnixStream::connect(socket))
        .await
        .map_err(within("connecting"))?
        .map_err(|e| format!("cannot connect to {} ({e})", socket.display()))?;
    let (sender, connection) = tokio::time::timeout(
        timeout,
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)),
    )
    .await
    .map_err(within("the HTTP/2 handshake"))?
    .map_err(|e| format!("HTTP/2 handshake failed ({e})"))?;
    // The connection is driven beside the call and dropped with it.
    let driven = tokio::spawn(connection);
    let mut grpc =
        tonic::client::Grpc::with_origin(Http2(sender), http::Uri::from_static("http://localhost"))
            .max_decoding_message_size(limits.max_bytes);
    let call = async {
        grpc.ready()
            .await
            .map_err(|e| format!("the connection closed ({e})"))?;
        grpc.unary(
            tonic::Request::new(ListPodResourcesRequest {}),
            PathAndQuery::from_static(LIST),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .map(tonic::Response::into_inner)
        .map_err(|status| describe(&status))
    };
    let answer = tokio::time::timeout(timeout, call)
        .await
        .map_err(within("List"));
    driven.abort();
    answer?
}

/// A gRPC status in a sentence (its message cut to 200 characters).
fn describe(status: &tonic::Status) -> String {
    let message: String = status.message().chars().take(200).collect();
    format!("List failed: {:?}: {message}", status.code())
}
