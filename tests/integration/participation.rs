//! The algod-compatible participation interface: `/v2/participation*` and `/debug/settings/*`,
//! each operation with success, auth (missing / wrong token → 401) and bad input.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use woodlark::modules::participation::ADMIN_TOKEN_FILE;
use woodlark::participation::ids::{encode_address, encode_participation_id};
use woodlark::participation::keygen::{Plan, generate};
use woodlark::participation::keys::{FALCON_PK_LEN, FALCON_SK_LEN, KeyMaterial, PartKey};
use woodlark::participation::msgpack::Enc;
use woodlark::participation::partfile;

use pprof::protos::Message;

use crate::util::{Http, Process, Resp, TestServer, answer_within, post_head, write_config};

const INVALID_TOKEN: &str = "{\"message\":\"Invalid API Token\"}";

pub fn admin_token(s: &TestServer) -> String {
    std::fs::read_to_string(s.dir.path().join(ADMIN_TOKEN_FILE))
        .expect("admin token file")
        .trim()
        .to_string()
}

fn address(n: u8) -> String {
    encode_address(&[n; 32])
}

/// A partkey file as algod's tools write it, and the participation id it must install as
/// (empty for deliberately broken keys).
fn partkey_file(key: &PartKey) -> (Vec<u8>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key.partkey");
    partfile::write(key, &path).unwrap();
    let id = key
        .public_keys()
        .map(|p| encode_participation_id(&p.id))
        .unwrap_or_default();
    (std::fs::read(&path).unwrap(), id)
}

pub fn new_key(parent: u8, first: u64, last: u64) -> PartKey {
    generate(&Plan::new([parent; 32], first, last, 0).unwrap())
}

async fn call(
    http: &Http,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Resp {
    match token {
        // algod's own header; Bearer is tested separately.
        Some(t) => {
            http.send(method, path, None, body, &[("x-algo-api-token", t)])
                .await
        }
        None => http.send(method, path, None, body, &[]).await,
    }
}

#[track_caller]
fn message(r: &Resp) -> String {
    r.json()["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message in {:?}", r.text()))
        .to_string()
}

pub async fn install(s: &TestServer, token: &str, key: &PartKey) -> String {
    let (bytes, id) = partkey_file(key);
    let r = call(
        &s.http,
        "POST",
        "/v2/participation",
        Some(token),
        Some(&bytes),
    )
    .await
    .expect(200);
    assert_eq!(r.json(), json!({ "partId": id }));
    id
}

pub async fn list(s: &TestServer, token: &str) -> Value {
    call(&s.http, "GET", "/v2/participation", Some(token), None)
        .await
        .expect(200)
        .json()
}

async fn wait_for_keys(s: &TestServer, token: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let keys = list(s, token).await;
        let keys = keys.as_array().cloned().unwrap_or_default();
        if keys.len() >= n {
            return keys;
        }
        assert!(Instant::now() < deadline, "key generation did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn state_proof_keys_body(rounds: &[u64]) -> Vec<u8> {
    let mut e = Enc::new();
    e.array(rounds.len() as u32);
    for rnd in rounds {
        e.map(2)
            .str("key")
            .map(2)
            .str("pk")
            .bin(&vec![1u8; FALCON_PK_LEN])
            .str("sk")
            .bin(&vec![2u8; FALCON_SK_LEN])
            .str("rnd")
            .uint(*rnd);
    }
    e.into_bytes()
}

#[tokio::test]
async fn every_operation_needs_the_admin_token() {
    let s = TestServer::start().await;
    let token = admin_token(&s);
    assert_eq!(token.len(), 64);
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(s.dir.path().join(ADMIN_TOKEN_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let id = encode_participation_id(&[7; 32]);
    let ops: Vec<(&str, String)> = vec![
        ("GET", "/debug/settings/pprof".into()),
        ("PUT", "/debug/settings/pprof".into()),
        ("GET", "/debug/settings/config".into()),
        ("GET", "/debug/pprof/profile".into()),
        ("GET", "/v2/participation".into()),
        ("POST", "/v2/participation".into()),
        (
            "POST",
            format!("/v2/participation/generate/{}?first=0&last=100", address(1)),
        ),
        ("GET", format!("/v2/participation/{id}")),
        ("DELETE", format!("/v2/participation/{id}")),
        ("POST", format!("/v2/participation/{id}")),
    ];
    let wrong = "0".repeat(64);
    for (method, path) in &ops {
        for r in [
            call(&s.http, method, path, None, Some(b"{}")).await,
            call(&s.http, method, path, Some(&wrong), Some(b"{}")).await,
            s.http
                .send(method, path, Some(&wrong), Some(b"{}"), &[])
                .await,
            s.http
                .send(
                    method,
                    path,
                    None,
                    Some(b"{}"),
                    &[("authorization", &format!("Basic {token}"))],
                )
                .await,
        ] {
            let r = r.expect(401);
            assert_eq!(r.text(), INVALID_TOKEN, "{method} {path}");
            assert!(
                r.header("content-type")
                    .unwrap()
                    .starts_with("application/json")
            );
        }
    }
    // The token works in both places algod reads it (Bearer scheme in any case).
    call(&s.http, "GET", "/v2/participation", Some(&token), None)
        .await
        .expect(200);
    s.http
        .get("/v2/participation", Some(&token))
        .await
        .expect(200);
    s.http
        .send(
            "GET",
            "/v2/participation",
            None,
            None,
            &[("authorization", &format!("bearer {token}"))],
        )
        .await
        .expect(200);
    // The token is stable across restarts.
    let dir = s.stop().await;
    let s = TestServer::start_in(dir, "").await;
    assert_eq!(admin_token(&s), token);
}

/// The upload routes read up to 128 MB. A request without the admin token is answered 401
/// before a byte of its body is read (before, the server read it whole first: ten such
/// uploads of 100 MB took its RSS from 40 MB to 500 MB). Bodies from senders nobody has
/// checked (here a stranger's, to another route) share the server's budget for them (1 MiB
/// here) and are refused past it, while the admin's upload is read outside it.
#[tokio::test]
async fn uploads_without_the_admin_token_are_refused_before_their_body_is_read() {
    let s = TestServer::start_with(
        "max_body_bytes = 1048576\nunauthenticated_body_budget_bytes = 1048576",
    )
    .await;
    let token = admin_token(&s);
    let addr = s.http.addr;
    let wrong = format!("X-Algo-API-Token: {}\r\n", "w".repeat(64));
    for (path, headers) in [
        ("/v2/participation", ""),
        ("/v2/participation", wrong.as_str()),
        (
            "/v2/participation/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "",
        ),
    ] {
        let mut stream = post_head(addr, path, headers, 100_000_000, 0).await;
        let answer = answer_within(&mut stream, Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("{path}: the body was waited for"));
        assert!(answer.starts_with("http/1.1 401"), "{path}: {answer}");
        assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    }

    // A stranger's body to an ordinary route holds all but 3,576 bytes of the budget; the
    // next is refused.
    let held = post_head(addr, "/api/secrets", "", 1_045_000, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut refused = post_head(addr, "/api/secrets", "", 100_000, 1).await;
    let answer = answer_within(&mut refused, Duration::from_secs(5)).await;
    assert!(
        answer
            .as_deref()
            .is_some_and(|a| a.starts_with("http/1.1 503") && a.contains("retry-after: 5")),
        "{answer:?}"
    );
    // The admin's upload, larger than what is left, is read all the same.
    let key = new_key(7, 1, 1000);
    let size = partkey_file(&key).0.len();
    assert!(size > 1_048_576 - 1_045_000, "{size} bytes");
    install(&s, &token, &key).await;
    drop(held);
}

#[tokio::test]
async fn a_configured_token_replaces_the_file() {
    let token = "c".repeat(64);
    let s =
        TestServer::start_with(&format!("\n[participation]\nadmin_token = \"{token}\"\n")).await;
    assert!(!s.dir.path().join(ADMIN_TOKEN_FILE).exists());
    call(&s.http, "GET", "/v2/participation", Some(&token), None)
        .await
        .expect(200);
    call(
        &s.http,
        "GET",
        "/v2/participation",
        Some(&"d".repeat(64)),
        None,
    )
    .await
    .expect(401);
}

#[tokio::test]
async fn routes_follow_the_mount() {
    let s = TestServer::start_with("\n[participation]\nmount = \"/algod\"\n").await;
    let token = admin_token(&s);
    call(
        &s.http,
        "GET",
        "/algod/v2/participation",
        Some(&token),
        None,
    )
    .await
    .expect(200);
    call(
        &s.http,
        "GET",
        "/algod/debug/settings/pprof",
        Some(&token),
        None,
    )
    .await
    .expect(200);
    call(&s.http, "GET", "/v2/participation", Some(&token), None)
        .await
        .expect(404);
}

#[tokio::test]
async fn import_get_list_delete() {
    let s = TestServer::start().await;
    let token = admin_token(&s);

    // No keys: Go's encoding of a nil slice.
    let r = call(&s.http, "GET", "/v2/participation", Some(&token), None)
        .await
        .expect(200);
    assert_eq!(r.text(), "null\n");
    assert_eq!(r.header("content-type"), Some("application/json"));

    let key = new_key(3, 1000, 3_000_000);
    let id = install(&s, &token, &key).await;
    let public = key.public_keys().unwrap();

    let r = call(
        &s.http,
        "GET",
        &format!("/v2/participation/{id}"),
        Some(&token),
        None,
    )
    .await
    .expect(200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.text().ends_with("}\n"));
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    assert_eq!(
        r.json(),
        json!({
            "address": address(3),
            "id": id,
            "key": {
                "selection-participation-key": b64.encode(public.selection),
                "vote-first-valid": 1000,
                "vote-key-dilution": 1732,
                "vote-last-valid": 3_000_000,
                "vote-participation-key": b64.encode(public.vote),
            }
        })
    );
    // Field order is algod's (alphabetical, as oapi-codegen generates the structs).
    let text = r.text();
    let pos = |k: &str| text.find(k).unwrap();
    assert!(pos("\"address\"") < pos("\"id\"") && pos("\"id\"") < pos("\"key\""));

    let keys = list(&s, &token).await;
    assert_eq!(keys.as_array().unwrap().len(), 1);
    assert_eq!(keys[0]["id"], id);

    // A second install of the same file is algod's duplicate error.
    let (bytes, _) = partkey_file(&key);
    let r = call(
        &s.http,
        "POST",
        "/v2/participation",
        Some(&token),
        Some(&bytes),
    )
    .await
    .expect(400);
    assert_eq!(
        message(&r),
        "ParticipationRegistry: cannot register duplicate participation key"
    );

    // Delete: 200 with an empty body; then both lookups are 404 with algod's messages.
    let r = call(
        &s.http,
        "DELETE",
        &format!("/v2/participation/{id}"),
        Some(&token),
        None,
    )
    .await
    .expect(200);
    assert!(r.body.is_empty());
    assert_eq!(r.header("content-length"), Some("0"));
    let r = call(
        &s.http,
        "DELETE",
        &format!("/v2/participation/{id}"),
        Some(&token),
        None,
    )
    .await
    .expect(404);
    assert_eq!(message(&r), "participation id not found");
    let r = call(
        &s.http,
        "GET",
        &format!("/v2/participation/{id}"),
        Some(&token),
        None,
    )
    .await
    .expect(404);
    assert_eq!(message(&r), "the participation ID was not found");
    assert_eq!(
        call(&s.http, "GET", "/v2/participation", Some(&token), None)
            .await
            .text(),
        "null\n"
    );

    // Events: created then deleted, each with the key as the API renders it.
    let events = s
        .app_state
        .ci
        .reads
        .read(|c| woodlark::store::events::list_after(c, 0, 1000))
        .await
        .unwrap();
    let ours: Vec<_> = events
        .iter()
        .filter(|e| e.record_type == "participation_keys")
        .collect();
    assert_eq!(ours.len(), 2);
    assert_eq!(ours[0].event_type(), "participation_keys.created");
    assert_eq!(ours[1].event_type(), "participation_keys.deleted");
    assert_eq!(ours[0].record_id, id);
    assert_eq!(ours[0].object["key"]["vote-key-dilution"], 1732);
    assert_eq!(ours[0].object["id"], id);
}

#[tokio::test]
async fn imports_reject_bad_files_with_400() {
    let s = TestServer::start().await;
    let token = admin_token(&s);
    let post = |body: Vec<u8>| {
        let token = token.clone();
        let s = &s;
        async move {
            call(
                &s.http,
                "POST",
                "/v2/participation",
                Some(&token),
                Some(&body),
            )
            .await
        }
    };

    let r = post(Vec::new()).await.expect(400);
    assert_eq!(message(&r), "payload was of zero length");
    let r = post(b"{\"not\": \"a partkey file\"}".to_vec())
        .await
        .expect(400);
    assert!(
        message(&r).contains("not a participation key file"),
        "{}",
        message(&r)
    );

    let key = new_key(4, 0, 1000);
    let (good, _) = partkey_file(&key);
    // Truncated, corrupted, and a zero parent address.
    for bad in [
        good[..good.len() / 2].to_vec(),
        {
            let mut b = good.clone();
            for x in b.iter_mut().skip(100).take(2000) {
                *x = 0xa5;
            }
            b
        },
        partkey_file(&PartKey {
            parent: [0; 32],
            ..key.clone()
        })
        .0,
        partkey_file(&PartKey {
            voting: vec![0xc1],
            ..key.clone()
        })
        .0,
    ] {
        let r = post(bad).await.expect(400);
        assert!(!message(&r).is_empty());
    }
    let r = post(
        partkey_file(&PartKey {
            parent: [0; 32],
            ..key.clone()
        })
        .0,
    )
    .await
    .expect(400);
    assert_eq!(
        message(&r),
        "cannot install partkey with missing (zero) parent address"
    );
    // An SQLite database that is not a partkey file.
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.db");
    let c = rusqlite::Connection::open(&other).unwrap();
    c.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    drop(c);
    let r = post(std::fs::read(&other).unwrap()).await.expect(400);
    assert!(message(&r).contains("schema"), "{}", message(&r));

    // Nothing was installed and no staged upload was left behind.
    assert_eq!(
        call(&s.http, "GET", "/v2/participation", Some(&token), None)
            .await
            .text(),
        "null\n"
    );
    let leftovers: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("partkey-upload"))
        .collect();
    assert!(leftovers.is_empty());
    // The good file still installs.
    post(good).await.expect(200);
}

#[tokio::test]
async fn ids_and_addresses_are_checked() {
    let s = TestServer::start().await;
    let token = admin_token(&s);
    for method in ["GET", "DELETE", "POST"] {
        let r = call(
            &s.http,
            method,
            "/v2/participation/AAAA",
            Some(&token),
            Some(b"x"),
        )
        .await
        .expect(400);
        assert_eq!(
            message(&r),
            "attempted to decode a string which was not a participation id: \"AAAA\""
        );
        let r = call(
            &s.http,
            method,
            "/v2/participation/abc!",
            Some(&token),
            Some(b"x"),
        )
        .await
        .expect(400);
        assert!(message(&r).starts_with("illegal base32 data at input byte"));
    }
    let unknown = encode_participation_id(&[1; 32]);
    call(
        &s.http,
        "GET",
        &format!("/v2/participation/{unknown}"),
        Some(&token),
        None,
    )
    .await
    .expect(404);

    let good = address(9);
    let mut bad = good.clone();
    bad.replace_range(0..1, if good.starts_with('A') { "B" } else { "A" });
    let r = call(
        &s.http,
        "POST",
        &format!("/v2/participation/generate/{bad}?first=0&last=10"),
        Some(&token),
        None,
    )
    .await
    .expect(400);
    assert_eq!(
        message(&r),
        format!(
            "Invalid format for parameter address: address {bad} is malformed, checksum verification failed"
        )
    );
    for path in [
        format!(
            "/v2/participation/generate/{}?first=0&last=10",
            good.to_lowercase()
        ),
        format!("/v2/participation/generate/{}?first=0&last=10", &good[..40]),
    ] {
        let r = call(&s.http, "POST", &path, Some(&token), None)
            .await
            .expect(400);
        assert!(message(&r).starts_with("Invalid format for parameter address"));
    }
}

#[tokio::test]
async fn generation_runs_in_the_background_and_installs() {
    let s = TestServer::start().await;
    let token = admin_token(&s);
    let addr = address(5);
    let gen_path = |q: &str| format!("/v2/participation/generate/{addr}?{q}");
    let generate = |q: &str| {
        let path = gen_path(q);
        let (http, token) = (&s.http, token.clone());
        async move { call(http, "POST", &path, Some(&token), None).await }
    };

    for (query, expected) in [
        (
            "last=10",
            "Invalid format for parameter first: query parameter 'first' is required",
        ),
        (
            "first=1",
            "Invalid format for parameter last: query parameter 'last' is required",
        ),
        ("first=x&last=10", "Invalid format for parameter first:"),
        ("first=1&last=-5", "Invalid format for parameter last:"),
        (
            "first=1&last=10&dilution=1.5",
            "Invalid format for parameter dilution:",
        ),
        (
            "first=0&last=99999999999999999999",
            "Invalid format for parameter last:",
        ),
        (
            "first=10&last=9",
            "the first round 10 is after the last round 9",
        ),
        (
            "first=0&last=16777216",
            "the validity range 0..16777216 is longer than the maximum",
        ),
    ] {
        let r = call(&s.http, "POST", &gen_path(query), Some(&token), None)
            .await
            .expect(400);
        assert!(
            message(&r).starts_with(expected),
            "{query}: {}",
            message(&r)
        );
    }

    let r = call(
        &s.http,
        "POST",
        &gen_path("first=1000&last=100000"),
        Some(&token),
        None,
    )
    .await
    .expect(200);
    assert_eq!(r.text(), "{}");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=UTF-8"));
    let keys = wait_for_keys(&s, &token, 1).await;
    let key = &keys[0];
    assert_eq!(key["address"], addr);
    assert_eq!(key["key"]["vote-first-valid"], 1000);
    assert_eq!(key["key"]["vote-last-valid"], 100000);
    assert_eq!(key["key"]["vote-key-dilution"], 1 + 314);
    assert!(key["key"].get("state-proof-key").is_none());
    assert_eq!(key["id"].as_str().unwrap().len(), 52);

    // An explicit dilution is kept.
    call(
        &s.http,
        "POST",
        &gen_path("first=0&last=1000&dilution=7"),
        Some(&token),
        None,
    )
    .await
    .expect(200);
    let keys = wait_for_keys(&s, &token, 2).await;
    assert_eq!(keys[1]["key"]["vote-key-dilution"], 7);

    // One generation at a time: a second request while one runs is a 400.
    generate("first=0&last=39999&dilution=1").await.expect(200);
    let r = generate("first=0&last=10").await.expect(400);
    assert_eq!(
        message(&r),
        "participation key generation already in progress"
    );
    assert!(s.app_state.participation.generating());
    let keys = wait_for_keys(&s, &token, 3).await;
    assert_eq!(keys[2]["key"]["vote-key-dilution"], 1);
    while s.app_state.participation.generating() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    generate("first=0&last=10").await.expect(200);
    wait_for_keys(&s, &token, 4).await;
}

#[tokio::test]
async fn a_generated_key_round_trips_through_a_partkey_file() {
    let s = TestServer::start().await;
    let token = admin_token(&s);
    call(
        &s.http,
        "POST",
        &format!(
            "/v2/participation/generate/{}?first=500&last=20000",
            address(6)
        ),
        Some(&token),
        None,
    )
    .await
    .expect(200);
    let keys = wait_for_keys(&s, &token, 1).await;
    let id = keys[0]["id"].as_str().unwrap().to_string();

    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("exported.partkey");
    s.app_state.keyring.export(&id, &path).await.unwrap();
    let bytes = std::fs::read(&path).unwrap();

    // A fresh server installs it under the same participation id, with the same public keys.
    let fresh = TestServer::start().await;
    let fresh_token = admin_token(&fresh);
    let r = call(
        &fresh.http,
        "POST",
        "/v2/participation",
        Some(&fresh_token),
        Some(&bytes),
    )
    .await
    .expect(200);
    assert_eq!(r.json()["partId"], id);
    let got = call(
        &fresh.http,
        "GET",
        &format!("/v2/participation/{id}"),
        Some(&fresh_token),
        None,
    )
    .await
    .expect(200)
    .json();
    assert_eq!(got, keys[0]);
}

#[tokio::test]
async fn private_key_material_is_sealed_at_rest() {
    let s = TestServer::start().await;
    let token = admin_token(&s);
    let key = new_key(8, 0, 5000);
    let (vrf_pk, vrf_sk) = woodlark::participation::keys::decode_vrf(&key.vrf).unwrap();
    let id = install(&s, &token, &key).await;
    let (stored_vrf, stored_voting): (String, String) = s
        .app_state
        .ci
        .reads
        .read(move |c| {
            c.query_row_for_tests(
                "SELECT vrf_secrets, voting_secrets FROM participation_keys WHERE id = ?1",
                [&id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
        })
        .await
        .unwrap();
    assert!(stored_vrf.starts_with("v1:") && stored_voting.starts_with("v1:"));
    s.app_state.ci.reads.ping().await.unwrap();
    // Nothing at rest in the database holds the VRF secret key (public keys are fine).
    let raw = s.stored_bytes();
    let contains = |needle: &[u8]| raw.windows(needle.len()).any(|w| w == needle);
    assert!(contains(&vrf_pk), "sanity: public key is stored in clear");
    assert!(!contains(&vrf_sk[..32]), "VRF seed stored in clear");
    // Nor does any API reply.
    let listing = list(&s, &token).await.to_string();
    use base64::Engine;
    assert!(!listing.contains(&base64::engine::general_purpose::STANDARD.encode(vrf_sk)));
}

#[tokio::test]
async fn append_state_proof_keys() {
    let s = TestServer::start().await;
    let token = admin_token(&s);
    let id = install(&s, &token, &new_key(2, 0, 2000)).await;
    let path = format!("/v2/participation/{id}");

    let r = call(
        &s.http,
        "POST",
        &path,
        Some(&token),
        Some(&state_proof_keys_body(&[256, 512])),
    )
    .await
    .expect(200);
    assert!(r.body.is_empty());
    let count = {
        let id = id.clone();
        s.app_state
            .ci
            .reads
            .read(move |c| woodlark::store::partkeys::state_proof_key_count(c, &id))
            .await
            .unwrap()
    };
    assert_eq!(count, 2);

    // Bad bodies.
    let r = call(&s.http, "POST", &path, Some(&token), Some(b""))
        .await
        .expect(400);
    assert_eq!(message(&r), "unable to parse keys from body: EOF");
    let r = call(
        &s.http,
        "POST",
        &path,
        Some(&token),
        Some(b"{\"json\": true}"),
    )
    .await
    .expect(400);
    assert!(message(&r).starts_with("unable to parse keys from body: msgpack decode error"));
    let r = call(&s.http, "POST", &path, Some(&token), Some(&[0x90]))
        .await
        .expect(400);
    assert_eq!(
        message(&r),
        "empty request, please attach keys to request body"
    );
    let mut short = Enc::new();
    short
        .array(1)
        .map(2)
        .str("key")
        .map(1)
        .str("pk")
        .bin(&[1; 10])
        .str("rnd")
        .uint(768);
    let r = call(
        &s.http,
        "POST",
        &path,
        Some(&token),
        Some(&short.into_bytes()),
    )
    .await
    .expect(400);
    assert!(
        message(&r).contains("\"pk\" must be 1793 bytes"),
        "{}",
        message(&r)
    );
    // A round that already has a key.
    let r = call(
        &s.http,
        "POST",
        &path,
        Some(&token),
        Some(&state_proof_keys_body(&[512, 768])),
    )
    .await
    .expect(400);
    assert!(message(&r).contains("round 512"), "{}", message(&r));
    // Unknown id.
    let unknown = encode_participation_id(&[3; 32]);
    let r = call(
        &s.http,
        "POST",
        &format!("/v2/participation/{unknown}"),
        Some(&token),
        Some(&state_proof_keys_body(&[256])),
    )
    .await
    .expect(404);
    assert_eq!(message(&r), "the participation ID was not found");

    // The event records the update; the rejected requests changed nothing.
    let events = s
        .app_state
        .ci
        .reads
        .read(|c| woodlark::store::events::list_after(c, 0, 1000))
        .await
        .unwrap();
    let types: Vec<String> = events
        .iter()
        .filter(|e| e.record_type == "participation_keys")
        .map(|e| e.event_type())
        .collect();
    assert_eq!(
        types,
        vec!["participation_keys.created", "participation_keys.updated"]
    );
}

/// The rates, and the CPU profiler they switch. Runs the server binary: the sampler is
/// process-wide and must not interrupt the other tests' threads.
#[tokio::test]
async fn pprof_settings_and_profile() {
    let dir = tempfile::tempdir().unwrap();
    let server = Process::start(&write_config(dir.path(), ""));
    let http = Http::new(server.addr);
    let token = std::fs::read_to_string(dir.path().join(ADMIN_TOKEN_FILE)).unwrap();
    let token = token.trim().to_string();
    let path = "/debug/settings/pprof";
    let get = || async {
        call(&http, "GET", path, Some(&token), None)
            .await
            .expect(200)
    };
    let put = |body: &'static str| {
        let token = token.clone();
        let http = &http;
        async move { call(http, "PUT", path, Some(&token), Some(body.as_bytes())).await }
    };
    let profile = || async { call(&http, "GET", "/debug/pprof/profile", Some(&token), None).await };

    let r = get().await;
    assert_eq!(r.text(), "{\"block-rate\":0,\"mutex-rate\":0}\n");
    assert_eq!(r.header("content-type"), Some("application/json"));
    // Nothing to download before profiling was ever on.
    let r = profile().await.expect(404);
    assert!(message(&r).starts_with("no CPU profile"), "{}", r.text());
    assert_eq!(
        call(&http, "GET", "/debug/pprof/profile", None, None)
            .await
            .expect(401)
            .text(),
        INVALID_TOKEN
    );

    // Old values come back, only for the fields sent; a non-zero rate starts the sampler.
    assert_eq!(
        put(r#"{"mutex-rate": 5}"#).await.expect(200).json(),
        json!({"mutex-rate": 0})
    );
    assert_eq!(
        put(r#"{"mutex-rate": 7, "block-rate": 1000}"#)
            .await
            .expect(200)
            .json(),
        json!({"mutex-rate": 5, "block-rate": 0})
    );
    assert_eq!(put("{}").await.expect(200).text(), "{}\n");
    assert_eq!(
        get().await.json(),
        json!({"mutex-rate": 7, "block-rate": 1000})
    );

    for body in [
        r#"{"mutex-rate": -1}"#,
        r#"{"mutex-rate": "5"}"#,
        r#"{"unknown": 1}"#,
        "not json",
        "",
    ] {
        let r = put(body).await.expect(400);
        assert!(
            message(&r).starts_with("failed to decode object: "),
            "{body}"
        );
    }
    let r = put(r#"{"block-rate": 2147483648}"#).await.expect(400);
    assert_eq!(
        message(&r),
        "blocking rate cannot be larger than max int32 value"
    );
    let long: &'static str =
        Box::leak(format!("{{\"mutex-rate\": {}1}}", " ".repeat(130)).into_boxed_str());
    let r = put(long).await.expect(400);
    assert_eq!(message(&r), "http: request body too large");
    // Rejected requests changed nothing.
    assert_eq!(
        get().await.json(),
        json!({"mutex-rate": 7, "block-rate": 1000})
    );

    // Real work for the sampler: key generations, one after the other (one at a time).
    let generate = format!(
        "/v2/participation/generate/{}?first=1&last=3000000",
        address(9)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut generated = 0;
    while generated < 4 {
        assert!(Instant::now() < deadline, "key generation did not finish");
        let r = call(&http, "POST", &generate, Some(&token), None).await;
        if r.status == 200 {
            generated += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = profile().await.expect(200);
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(r.header("x-woodlark-profiler"), Some("running"));
    let functions = profile_functions(&r.body);
    assert!(
        functions.iter().any(|f| f.contains("keygen")),
        "the key generator's frames are sampled: {functions:?}"
    );

    // Both rates back to zero: the sampler stops, its last profile stays downloadable.
    assert_eq!(
        put(r#"{"mutex-rate": 0, "block-rate": 0}"#)
            .await
            .expect(200)
            .json(),
        json!({"mutex-rate": 7, "block-rate": 1000})
    );
    let r = profile().await.expect(200);
    assert_eq!(r.header("x-woodlark-profiler"), Some("stopped"));
    assert!(
        profile_functions(&r.body)
            .iter()
            .any(|f| f.contains("keygen"))
    );
    drop(server);
}

/// Decodes a pprof protobuf and returns the names of the functions in its samples' stacks.
fn profile_functions(body: &[u8]) -> Vec<String> {
    let profile = pprof::protos::Profile::decode(body).expect("a pprof protobuf");
    assert!(!profile.sample.is_empty(), "the profile has samples");
    let name = |i: i64| profile.string_table[i as usize].clone();
    assert_eq!(
        profile
            .sample_type
            .iter()
            .map(|t| name(t.ty))
            .collect::<Vec<_>>(),
        ["samples", "cpu"]
    );
    profile.function.iter().map(|f| name(f.name)).collect()
}

#[tokio::test]
async fn effective_config() {
    let s = TestServer::start_with("metrics_token = \"metrics-token-not-for-eyes\"").await;
    let token = admin_token(&s);
    let r = call(&s.http, "GET", "/debug/settings/config", Some(&token), None)
        .await
        .expect(200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(!r.text().contains("metrics-token-not-for-eyes"));
    let v = r.json();
    assert_eq!(v["server"]["metrics_token"], "<redacted>");
    assert_eq!(v["server"]["listen"], "127.0.0.1:0");
    assert_eq!(v["server"]["data_dir"], s.dir.path().display().to_string());
    // The test config's own values, and defaults for keys it does not set.
    assert_eq!(v["auth"]["admins"], json!(["envadmin"]));
    assert_eq!(v["events"]["mount"], "/events");
    assert_eq!(v["participation"]["enabled"], true);
    assert_eq!(v["storage"]["synchronous"], "full");
}
