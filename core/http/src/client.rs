//! Outbound HTTP: the one client the server's other parts share (the agent protocol of
//! `woodlark agent`, plugins' `http-client` capability), so that only this crate knows hyper.
//!
//! A [`Client`] speaks HTTP/1.1 over plain TCP or TLS (rustls with the Mozilla root set, so no
//! system state is consulted) and pools connections. [`Client::send`] is one exchange: it does
//! not follow redirects (a 3xx with a `Location` comes back without its body; following it is
//! the caller's policy) and reads the body under a size limit. Deadlines are the caller's too
//! (`tokio::time::timeout` around the call).
//!
//! [`Client::unverified`] is the same client without certificate checks, for forges an
//! operator marked `skip_verify` (self-signed certificates): the handshake's signatures are
//! still checked against the certificate the server presents, but not who issued it or
//! which names it covers, as Go's `InsecureSkipVerify` (what upstream uses) does.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("TLS set-up failed: {0}")]
    Tls(String),
    #[error("{0}")]
    Transport(String),
    #[error("response body larger than {0} bytes")]
    TooLarge(usize),
    #[error("reading response: {0}")]
    Body(String),
}

/// A pooled HTTP(S) client; cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<HttpConnector>,
        Full<Bytes>,
    >,
}

impl Client {
    /// A client that verifies servers against the Mozilla root set.
    pub fn new() -> Result<Client, ClientError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let tls = tls_builder()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Client::with_tls(tls))
    }

    /// A client that accepts any server certificate (see the module docs).
    pub fn unverified() -> Result<Client, ClientError> {
        let tls = tls_builder()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(woodlark_stdx::tls::AnyCertificate(
                provider(),
            )))
            .with_no_client_auth();
        Ok(Client::with_tls(tls))
    }

    fn with_tls(tls: rustls::ClientConfig) -> Client {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Client {
            inner: hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https),
        }
    }

    /// Sends `request` and reads the answer's body, at most `max_body` bytes.
    pub async fn send(
        &self,
        request: http::Request<Bytes>,
        max_body: usize,
    ) -> Result<http::Response<Bytes>, ClientError> {
        let response = self
            .inner
            .request(request.map(Full::new))
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let (parts, body) = response.into_parts();
        let redirect =
            parts.status.is_redirection() && parts.headers.contains_key(http::header::LOCATION);
        if redirect {
            return Ok(http::Response::from_parts(parts, Bytes::new()));
        }
        let body = Limited::new(body, max_body)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    ClientError::TooLarge(max_body)
                } else {
                    ClientError::Body(e.to_string())
                }
            })?
            .to_bytes();
        Ok(http::Response::from_parts(parts, body))
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_builder()
-> Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier>, ClientError> {
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-shot server that answers every connection with `reply`.
    async fn serve(reply: &'static str) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(reply.as_bytes()).await;
            }
        });
        format!("http://{addr}/")
    }

    fn get(url: &str) -> http::Request<Bytes> {
        http::Request::get(url).body(Bytes::new()).unwrap()
    }

    #[tokio::test]
    async fn reads_the_body_under_its_limit() {
        let url =
            serve("HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello").await;
        let client = Client::new().unwrap();
        let ok = client.send(get(&url), 5).await.unwrap();
        assert_eq!((ok.status().as_u16(), &ok.body()[..]), (200, &b"hello"[..]));
        let err = client.send(get(&url), 4).await.unwrap_err();
        assert!(matches!(err, ClientError::TooLarge(4)), "{err}");
    }

    #[tokio::test]
    async fn redirects_come_back_unfollowed_and_without_body() {
        let url = serve(
            "HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\ncontent-length: 3\r\n\
             connection: close\r\n\r\nabc",
        )
        .await;
        let resp = Client::new().unwrap().send(get(&url), 1).await.unwrap();
        assert_eq!(resp.status().as_u16(), 302);
        assert_eq!(resp.headers()["location"], "/elsewhere");
        assert!(resp.body().is_empty());
    }

    /// An HTTPS server with a self-signed certificate for 127.0.0.1, answering 200 "tls".
    async fn serve_self_signed() -> String {
        let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let key =
            rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(sock).await else {
                        return;
                    };
                    let mut buf = [0u8; 4096];
                    let _ = tls.read(&mut buf).await;
                    let reply =
                        "HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\ntls";
                    let _ = tls.write_all(reply.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        format!("https://{addr}/")
    }

    #[tokio::test]
    async fn only_the_unverified_client_accepts_a_self_signed_certificate() {
        let url = serve_self_signed().await;
        let err = Client::new()
            .unwrap()
            .send(get(&url), 10)
            .await
            .unwrap_err();
        assert!(matches!(err, ClientError::Transport(_)), "{err}");
        let ok = Client::unverified()
            .unwrap()
            .send(get(&url), 10)
            .await
            .unwrap();
        assert_eq!((ok.status().as_u16(), &ok.body()[..]), (200, &b"tls"[..]));
    }

    #[tokio::test]
    async fn a_closed_port_is_a_transport_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        drop(listener);
        let err = Client::new()
            .unwrap()
            .send(get(&url), 10)
            .await
            .unwrap_err();
        assert!(matches!(err, ClientError::Transport(_)), "{err}");
    }
}
