use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::util::{TestServer, answer_within, post_head};

#[tokio::test]
async fn unknown_route_is_404_plain_text() {
    let s = TestServer::start().await;
    let r = s.http.get("/api/nope", None).await.expect(404);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    assert!(r.text().contains("/api/nope"));
    s.http.get("/nope", None).await.expect(404);
}

#[tokio::test]
async fn wrong_method_is_405_with_allow() {
    let s = TestServer::start().await;
    let r = s
        .http
        .send("PUT", "/api/users", None, Some(b"{}"), &[])
        .await
        .expect(405);
    assert_eq!(r.header("allow"), Some("GET, POST, HEAD, OPTIONS"));
    let r = s
        .http
        .send("POST", "/healthz", None, None, &[])
        .await
        .expect(405);
    assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
}

#[tokio::test]
async fn options_and_head_are_answered() {
    let s = TestServer::start().await;
    let r = s
        .http
        .send("OPTIONS", "/api/user", None, None, &[])
        .await
        .expect(200);
    assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let r = s
        .http
        .send("HEAD", "/version", None, None, &[])
        .await
        .expect(200);
    assert!(r.body.is_empty());
}

#[tokio::test]
async fn security_headers_on_every_response() {
    let s = TestServer::start().await;
    for path in ["/version", "/api/user", "/missing"] {
        let r = s.http.get(path, None).await;
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{path}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert!(
            r.header("cache-control").unwrap().contains("no-cache"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn oversized_body_is_413_and_changes_nothing() {
    let s = TestServer::start_with("max_body_bytes = 4096").await;
    let p = s.principals().await;
    let big = format!(
        "{{\"login\":\"huge\",\"email\":\"{}\"}}",
        "x".repeat(10_000)
    );
    let r = s
        .http
        .post("/api/users", Some(&p.admin), &big)
        .await
        .expect(413);
    assert!(r.text().contains("4096"));
    // The body was left unread: the client is told not to reuse the connection.
    assert_eq!(r.header("connection"), Some("close"));
    s.http
        .get("/api/users/huge", Some(&p.admin))
        .await
        .expect(404);

    // Without Content-Length (chunked), the limit still holds while streaming.
    let mut stream = TcpStream::connect(s.http.addr).await.unwrap();
    let head = format!(
        "POST /api/users HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n",
        p.admin
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = "y".repeat(3000);
    for _ in 0..3 {
        let _ = stream
            .write_all(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes())
            .await;
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 413"));
}

#[tokio::test]
async fn slow_headers_are_cut_off() {
    let s = TestServer::start_with("header_read_timeout_ms = 300").await;
    let mut stream = TcpStream::connect(s.http.addr).await.unwrap();
    stream
        .write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // Never finish the headers: the server must give up and close the connection.
    let mut buf = vec![0u8; 1024];
    let started = std::time::Instant::now();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(read.is_ok(), "connection was not closed");
    assert!(started.elapsed() >= Duration::from_millis(250));
    // A complete request on a fresh connection still works.
    s.http.get("/version", None).await.expect(200);
}

#[tokio::test]
async fn a_later_requests_slow_headers_are_cut_off_too() {
    // The idle timeout is long; the next request's headers are still due within the header
    // timeout of the previous response's end.
    let s = TestServer::start_with("header_read_timeout_ms = 400\nidle_timeout_ms = 60000").await;
    let mut stream = TcpStream::connect(s.http.addr).await.unwrap();
    stream
        .write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let answered = std::time::Instant::now();
    // Half the next request's headers, a byte at a time, then nothing more.
    for byte in b"GET /version HTTP/1.1\r\nHo" {
        stream.write_all(&[*byte]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
        .await
        .expect("the connection trickling its second request was never closed")
        .unwrap();
    let held = answered.elapsed();
    assert!(
        held >= Duration::from_millis(350) && held < Duration::from_millis(2500),
        "{held:?}"
    );
    assert!(
        rest.is_empty(),
        "answered: {}",
        String::from_utf8_lossy(&rest)
    );
}

/// An agent's log batch may be 8 MB: a request whose agent token does not verify is
/// answered before a byte of its body is read, not after reading it whole.
#[tokio::test]
async fn an_agent_log_upload_without_a_valid_token_is_refused_before_its_body() {
    let s = TestServer::start().await;
    for headers in ["", "Authorization: Bearer not-an-agent-token\r\n"] {
        let mut stream = post_head(
            s.http.addr,
            "/api/agent/workflows/1/logs",
            headers,
            8_000_000,
            0,
        )
        .await;
        let answer = answer_within(&mut stream, Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("{headers:?}: the body was waited for"));
        assert!(answer.starts_with("http/1.1 401"), "{answer}");
    }
}

#[tokio::test]
async fn a_trickled_body_is_cut_off_with_408_even_anonymously() {
    let s = TestServer::start_with("body_read_timeout_ms = 400").await;
    // No user token, only a repository's hook token: a hook that names no target is refused
    // before its body is read, so the body is trickled to a valid one.
    let p = s.principals().await;
    s.git_repo(&p.admin, &p.alice, "alice/slow").await;
    let hook = s.hook_path("alice/slow");
    let mut stream = TcpStream::connect(s.http.addr).await.unwrap();
    stream
        .write_all(
            format!("POST {hook} HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n0")
                .as_bytes(),
        )
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = vec![0u8; 1024];
        loop {
            // One byte every 100 ms: the body would take 100 s.
            let _ = stream.write_all(b" ").await;
            tokio::select! {
                n = stream.read(&mut buf) => match n {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                },
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            if got.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer to a trickled body");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(started.elapsed() >= Duration::from_millis(350));
    s.http.get("/version", None).await.expect(200);
}

#[tokio::test]
async fn an_array_where_an_object_is_expected_is_400_and_creates_nothing() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let r = s
        .http
        .post(
            "/api/users",
            Some(&p.admin),
            r#"["mallory", "m@example.com"]"#,
        )
        .await
        .expect(400);
    assert!(r.text().contains("expected an object"), "{}", r.text());
    s.http
        .get("/api/users/mallory", Some(&p.admin))
        .await
        .expect(404);
    s.http
        .post("/api/secrets", Some(&p.admin), r#"["n", "v"]"#)
        .await
        .expect(400);
    s.http
        .post("/api/users", Some(&p.admin), "  ")
        .await
        .expect(400);
}

#[tokio::test]
async fn http2_prior_knowledge_is_served() {
    let s = TestServer::start().await;
    let stream = TcpStream::connect(s.http.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get(format!("http://{}/version", s.http.addr))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
}

#[tokio::test]
async fn metrics_count_requests_by_route() {
    let s = TestServer::start().await;
    s.http.get("/api/users/someone", None).await.expect(401);
    s.http.get("/api/users/other", None).await.expect(401);
    s.http.get("/nowhere", None).await.expect(404);
    let r = s.http.get("/metrics", None).await.expect(200);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = r.text();
    assert!(
        text.contains(
            "woodlark_http_requests_total{route=\"/api/users/{login}\",method=\"GET\",status=\"401\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains("route=\"<unmatched>\",method=\"GET\",status=\"404\"} 1"));
    assert!(
        text.contains(
            "woodlark_http_request_duration_seconds_count{route=\"/api/users/{login}\"} 2"
        )
    );
    assert!(text.contains("woodlark_uptime_seconds"));
}

#[tokio::test]
async fn metrics_token_is_enforced_when_set() {
    let s = TestServer::start_with("metrics_token = \"m3tr1cs\"").await;
    s.http.get("/metrics", None).await.expect(401);
    s.http.get("/metrics", Some("wrong")).await.expect(401);
    s.http.get("/metrics", Some("m3tr1cs")).await.expect(200);
}

#[tokio::test]
async fn custom_mount_moves_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let text = crate::util::config_text(dir.path(), "") + "[ci]\nmount = \"/woodpecker/api\"\n";
    let config = woodlark::config::Config::from_toml(&text, "t.toml", &[]).unwrap();
    let app = woodlark::app::App::build(
        config,
        woodlark::logging::LogControl::detached(woodlark::logging::LogLevel::Info),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = crate::util::Http::new(listener.local_addr().unwrap());
    tokio::spawn(app.serve(listener, std::future::pending()));
    http.get("/woodpecker/api/user", None).await.expect(401);
    http.get("/api/user", None).await.expect(404);
    http.get("/healthz", None).await.expect(204);
}

/// A self-signed certificate for 127.0.0.1 written to `dir`: (cert path, key path, DER).
fn self_signed(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, Vec<u8>) {
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.cert.pem()).unwrap();
    std::fs::write(&k, cert.signing_key.serialize_pem()).unwrap();
    (c, k, cert.cert.der().to_vec())
}

async fn tls_connect(
    addr: std::net::SocketAddr,
    der: &[u8],
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    try_tls_connect(addr, der, alpn).await.unwrap()
}

async fn try_tls_connect(
    addr: std::net::SocketAddr,
    der: &[u8],
    alpn: &[&[u8]],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    use tokio_rustls::rustls::{
        self,
        pki_types::{CertificateDer, ServerName},
    };
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(der.to_vec())).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = TcpStream::connect(addr).await?;
    connector
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
}

#[tokio::test]
async fn tls_offers_http2_by_alpn_and_http1_too() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, der) = self_signed(dir.path());
    let s = TestServer::start_with(&format!(
        "tls_cert = {:?}\ntls_key = {:?}",
        cert.display().to_string(),
        key.display().to_string()
    ))
    .await;

    let tls = tls_connect(s.http.addr, &der, &[b"h2", b"http/1.1"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get("https://127.0.0.1/version")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), hyper::Version::HTTP_2);

    let tls = tls_connect(s.http.addr, &der, &[b"http/1.1"]).await;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get("/healthz")
        .header("host", "127.0.0.1")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    assert_eq!(sender.send_request(req).await.unwrap().status(), 204);
}

#[test]
fn tls_needs_both_files_and_readable_pem() {
    let dir = tempfile::tempdir().unwrap();
    let text = crate::util::config_text(dir.path(), "tls_cert = \"/x.pem\"");
    let err = woodlark::config::Config::from_toml(&text, "t.toml", &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("server.tls_cert"), "{err}");
    let bad = dir.path().join("bad.pem");
    std::fs::write(&bad, "not pem").unwrap();
    let text = crate::util::config_text(
        dir.path(),
        &format!(
            "tls_cert = {:?}\ntls_key = {:?}",
            bad.display().to_string(),
            bad.display().to_string()
        ),
    );
    let config = woodlark::config::Config::from_toml(&text, "t.toml", &[]).unwrap();
    let err = woodlark::app::App::build(
        config,
        woodlark::logging::LogControl::detached(woodlark::logging::LogLevel::Info),
    )
    .err()
    .expect("bad PEM is refused")
    .to_string();
    assert!(err.contains("bad.pem"), "{err}");
}

/// Everything the server sends on `stream` until it closes it (or 5 s pass).
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Retries `GET /version` on fresh connections until one is answered 200: closed
/// connections free their places as soon as the server has seen them close.
async fn version_answers_again(addr: std::net::SocketAddr) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = read_to_close(&mut stream).await;
        if answer.starts_with("HTTP/1.1 200") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still refused: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The head of a request whose body never comes: it is in flight (the handler waits for the
/// body) until the body timeout.
const PENDING_BODY: &[u8] =
    b"POST /api/users HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{";

/// Opens a connection with a request in flight on it.
async fn busy_connection(addr: std::net::SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(PENDING_BODY).await.unwrap();
    stream
}

#[tokio::test]
async fn connections_past_the_limit_get_a_clean_503_while_every_place_is_busy() {
    let s = TestServer::start_with("max_connections = 8").await;
    // Eight requests in flight take every place (the backlog is accepted in order).
    let mut busy = Vec::new();
    for _ in 0..8 {
        busy.push(busy_connection(s.http.addr).await);
    }
    // Give the server time to read the eight heads: each place is busy, none idle.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The ninth is answered at once, without the server waiting for its request.
    let mut ninth = TcpStream::connect(s.http.addr).await.unwrap();
    let answer = read_to_close(&mut ninth).await;
    assert!(
        answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
        "{answer:?}"
    );
    let head = answer.to_ascii_lowercase();
    assert!(head.contains("\r\nretry-after: 1\r\n"), "{answer}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{answer}");
    // One with its request already sent is refused the same way.
    let mut tenth = TcpStream::connect(s.http.addr).await.unwrap();
    tenth
        .write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(read_to_close(&mut tenth).await.starts_with("HTTP/1.1 503"));

    drop(busy);
    version_answers_again(s.http.addr).await;
    let metrics = s.http.get("/metrics", None).await.expect(200).text();
    assert!(
        metrics.contains("\nwoodlark_http_connections_max 8\n"),
        "{metrics}"
    );
    // The two above, and any retry that came before the busy ones were seen closing.
    assert!(
        counter(&metrics, "woodlark_http_connections_refused_total") >= 2,
        "{metrics}"
    );
    assert_eq!(
        counter(&metrics, "woodlark_http_connections_evicted_total"),
        0,
        "{metrics}"
    );
}

/// A counter's value in a `/metrics` page.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
}

/// The attack of issue 45: sockets that never send a byte, more of them than there are
/// places. They held every place for as long as they stayed open (every other client got
/// 503); now the one idle the longest makes room for each new connection, and none outlives
/// the header timeout counted from accept.
#[tokio::test]
async fn sockets_that_send_nothing_never_starve_a_request() {
    let s = TestServer::start_with("max_connections = 16\nheader_read_timeout_ms = 2000").await;
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(TcpStream::connect(s.http.addr).await.unwrap());
    }
    // A request in flight is never the one closed for room.
    let mut busy = busy_connection(s.http.addr).await;
    for _ in 0..20 {
        idle.push(TcpStream::connect(s.http.addr).await.unwrap());
    }
    // A normal client is answered at once, on a fresh connection.
    let started = std::time::Instant::now();
    let r = s.http.get("/version", None).await.expect(200);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "answered after {:?}",
        started.elapsed()
    );
    assert!(!r.text().is_empty());
    let metrics = s.http.get("/metrics", None).await.expect(200).text();
    assert!(
        counter(&metrics, "woodlark_http_connections_evicted_total") >= 40,
        "{metrics}"
    );
    // The busy request is still waiting for its body: the server answers it with 408 when
    // the body timeout passes, not a closed connection.
    let mut buf = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(200), busy.read(&mut buf))
            .await
            .is_err(),
        "the request in flight was cut"
    );
    // The idle sockets still open are closed once the header timeout has run from accept.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut closed = 0;
    for stream in &mut idle {
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(50), stream.read(&mut buf)).await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, idle.len(), "idle sockets left open");
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let s = TestServer::start_with("header_read_timeout_ms = 300").await;
    let mut stream = TcpStream::connect(s.http.addr).await.unwrap();
    let started = std::time::Instant::now();
    let mut buf = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("the silent connection was never closed");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    assert!(started.elapsed() >= Duration::from_millis(250));
    // A kept-alive connection idle after its request is closed after the idle timeout.
    let s = TestServer::start_with("header_read_timeout_ms = 3000\nidle_timeout_ms = 400").await;
    let mut stream = TcpStream::connect(s.http.addr).await.unwrap();
    stream
        .write_all(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let answered = std::time::Instant::now();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest))
        .await
        .expect("the idle kept-alive connection was never closed")
        .unwrap();
    let idle = answered.elapsed();
    assert!(
        idle >= Duration::from_millis(350) && idle < Duration::from_millis(2500),
        "{idle:?}"
    );
}

#[tokio::test]
async fn tls_connections_count_toward_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, der) = self_signed(dir.path());
    let s = TestServer::start_with(&format!(
        "max_connections = 2\ntls_cert = {:?}\ntls_key = {:?}",
        cert.display().to_string(),
        key.display().to_string()
    ))
    .await;
    // Two TLS connections with a request in flight take both places.
    let mut first = tls_connect(s.http.addr, &der, &[b"http/1.1"]).await;
    let mut second = tls_connect(s.http.addr, &der, &[b"http/1.1"]).await;
    for stream in [&mut first, &mut second] {
        stream.write_all(PENDING_BODY).await.unwrap();
        stream.flush().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        try_tls_connect(s.http.addr, &der, &[b"http/1.1"])
            .await
            .is_err()
    );
    drop((first, second));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while try_tls_connect(s.http.addr, &der, &[b"http/1.1"])
        .await
        .is_err()
    {
        assert!(std::time::Instant::now() < deadline, "TLS still refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // An idle TLS connection makes room for a new one.
    let _idle = tls_connect(s.http.addr, &der, &[b"http/1.1"]).await;
    let _also_idle = tls_connect(s.http.addr, &der, &[b"http/1.1"]).await;
    tls_connect(s.http.addr, &der, &[b"http/1.1"]).await;
}
