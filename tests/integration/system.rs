use crate::util::TestServer;

#[tokio::test]
async fn healthz_is_204_and_500_when_the_database_is_gone() {
    let s = TestServer::start().await;
    let r = s.http.get("/healthz", None).await.expect(204);
    assert!(r.body.is_empty());
    // Stop the storage writer: the server is up but cannot use its database.
    s.app_state.ci.store_for_tests().close();
    s.http.get("/healthz", None).await.expect(500);
}

#[tokio::test]
async fn version_is_public_json() {
    let s = TestServer::start().await;
    let v = s.http.get("/version", None).await.expect(200).json();
    assert!(v["source"].is_string());
    let version = v["version"].as_str().unwrap();
    assert!(version.starts_with("3."), "{version}");
    assert!(version.contains(env!("CARGO_PKG_VERSION")));
}

#[tokio::test]
async fn log_level_round_trip() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let a = Some(p.admin.as_str());
    let r = s.http.get("/api/log-level", a).await.expect(200).json();
    assert_eq!(r["log-level"], "info");
    for level in [
        "trace", "debug", "info", "warn", "error", "fatal", "panic", "disabled",
    ] {
        let body = format!("{{\"log-level\":\"{level}\"}}");
        let r = s
            .http
            .post("/api/log-level", a, &body)
            .await
            .expect(200)
            .json();
        assert_eq!(r["log-level"], level);
        let r = s.http.get("/api/log-level", a).await.expect(200).json();
        assert_eq!(r["log-level"], level);
    }
    for bad in [
        r#"{"log-level":"loud"}"#,
        r#"{"log-level":5}"#,
        r#"{}"#,
        "nope",
    ] {
        s.http.post("/api/log-level", a, bad).await.expect(400);
    }
    let r = s.http.get("/api/log-level", a).await.json();
    assert_eq!(r["log-level"], "disabled", "a bad request changes nothing");
}

#[tokio::test]
async fn signature_public_key_is_stable_pem() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    s.http
        .get("/api/signature/public-key", None)
        .await
        .expect(401);
    let a = s
        .http
        .get("/api/signature/public-key", Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert!(a.starts_with("-----BEGIN PUBLIC KEY-----\n"));
    assert!(a.trim_end().ends_with("-----END PUBLIC KEY-----"));
    // The key is kept in the database, sealed, so replicas share it; the data dir has no
    // copy (storage::replicas_serve_one_signing_key).
    assert!(!s.dir.path().join("signature.key").exists());
    // The same key after a restart.
    let dir = s.stop().await;
    let s = TestServer::start_in(dir, "").await;
    let token = s.http.get("/api/user", Some(&p.alice)).await.expect(200);
    drop(token);
    let b = s
        .http
        .get("/api/signature/public-key", Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert_eq!(a, b);
}

#[tokio::test]
async fn data_survives_a_restart() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    s.http
        .post("/api/users", Some(&p.admin), r#"{"login":"erin"}"#)
        .await
        .expect(200);
    let dir = s.stop().await;
    let s = TestServer::start_in(dir, "").await;
    s.http
        .get("/api/users/erin", Some(&p.admin))
        .await
        .expect(200);
    s.http.get("/api/user", Some(&p.alice)).await.expect(200);
}
