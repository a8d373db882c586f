//! A settings or admin form the API refuses for what was typed comes back with what was
//! typed (`modules/ui/refused.rs`): the API's status, an error summary linking to the form's
//! section, the message beside the form, every field as typed but a secret's value or a
//! registry's password, and nothing stored. A caller the API refuses outright still gets an
//! error page, not the form.

use crate::ui_settings::{assert_page, post_form, signed_in};
use crate::util::TestServer;

/// The `value` attribute of the input with id `id` on `page`.
fn value_of(page: &str, id: &str) -> String {
    let at = page
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}: {page}"));
    let tag = &page[at..at + page[at..].find('>').unwrap()];
    let Some(v) = tag.find("value=\"") else {
        return String::new();
    };
    let rest = &tag[v + "value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// Whether the checkbox `name=value` is ticked on `page` (the first such checkbox).
fn ticked(page: &str, name: &str, value: &str) -> bool {
    let needle = format!("type=\"checkbox\" name=\"{name}\" value=\"{value}\"");
    let at = page
        .find(&needle)
        .unwrap_or_else(|| panic!("no {needle}: {page}"));
    page[at..at + page[at..].find('>').unwrap()].contains(" checked")
}

/// The error summary at the top of a refused form's page, linking to `section`.
fn assert_summary(page: &str, section: &str, message: &str) {
    assert!(page.contains("There is a problem"), "{page}");
    let link = format!("<a href=\"#{section}\">");
    let at = page.find(&link).unwrap_or_else(|| panic!("{link}: {page}"));
    assert!(page[at..].contains(message), "{message}: {page}");
}

#[tokio::test]
async fn a_refused_form_comes_back_with_what_was_typed() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let page = format!("/repos/{id}/settings");
    let mut alice = signed_in(&s, "alice").await;

    // A cron with a schedule the API cannot read: the page again, the cron form open with
    // its fields, nothing stored.
    let r = post_form(
        &mut alice,
        &page,
        &format!("{page}/crons"),
        &[
            ("name", "nightly-typed"),
            ("schedule", "every full moon"),
            ("timezone", "Europe/Berlin"),
            ("branch", "release"),
        ],
    )
    .await;
    assert!(r.status.is_client_error(), "{}", r.status);
    assert_page(&r);
    let text = r.text();
    assert_summary(&text, "crons", "");
    assert!(
        text.contains("class=\"field-error\" id=\"add-cron-error\""),
        "{text}"
    );
    assert_eq!(value_of(&text, "cron-name"), "nightly-typed");
    assert_eq!(value_of(&text, "cron-schedule"), "every full moon");
    assert_eq!(value_of(&text, "cron-timezone"), "Europe/Berlin");
    assert_eq!(value_of(&text, "cron-branch"), "release");
    // Only that form: the secret form's fields are as on a visit.
    assert_eq!(value_of(&text, "secret-name"), "");
    let crons = http
        .get(&format!("/api/repos/{id}/cron"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(crons.as_array().map(Vec::len), Some(0), "{crons}");

    // A secret refused (a name taken): its name, events, images and note back, its value not.
    const VALUE: &str = "typed-value-never-echoed";
    let add = format!("{page}/secrets");
    let fields = [
        ("name", "deploy_key"),
        ("value", "first"),
        ("events", "push"),
    ];
    post_form(&mut alice, &page, &add, &fields)
        .await
        .expect(303);
    let r = post_form(
        &mut alice,
        &page,
        &add,
        &[
            ("name", "deploy_key"),
            ("value", VALUE),
            ("events", "tag"),
            ("events", "deployment"),
            ("images", "alpine:3"),
            ("note", "typed note"),
        ],
    )
    .await
    .expect(409);
    let text = r.text();
    assert_summary(&text, "secrets", "");
    assert_eq!(value_of(&text, "secret-name"), "deploy_key");
    assert_eq!(value_of(&text, "secret-images"), "alpine:3");
    assert_eq!(value_of(&text, "secret-note"), "typed note");
    assert!(text.contains("id=\"ev-new-tag\" checked"), "{text}");
    assert!(text.contains("id=\"ev-new-deployment\" checked"), "{text}");
    assert!(!text.contains("id=\"ev-new-push\" checked"), "{text}");
    assert!(!text.contains(VALUE), "the value echoed: {text}");

    // The edit form of one secret among several: that secret's form open with the message,
    // the other's as on a visit.
    post_form(
        &mut alice,
        &page,
        &add,
        &[("name", "other"), ("value", "o"), ("events", "push")],
    )
    .await
    .expect(303);
    let r = post_form(
        &mut alice,
        &page,
        &format!("{page}/secrets/edit"),
        &[
            ("name", "other"),
            ("note", "edited note"),
            ("events", "bogus"),
        ],
    )
    .await
    .expect(422);
    let text = r.text();
    assert_eq!(text.matches("class=\"field-error\"").count(), 1, "{text}");
    let other_form = &text[text.find("Edit other").unwrap()..];
    assert!(other_form.contains("value=\"edited note\""), "{text}");
    let first_form = &text[text.find("Edit deploy_key").unwrap()..text.find("Edit other").unwrap()];
    assert!(!first_form.contains("edited note"), "{text}");
    let stored = http
        .get(&format!("/api/repos/{id}/secrets/other"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(stored["note"], "", "nothing changed: {stored}");

    // A registry without a password: the address and user back, never a password field's.
    let r = post_form(
        &mut alice,
        &page,
        &format!("{page}/registries"),
        &[
            ("address", "r.example"),
            ("username", "robot"),
            ("password", ""),
        ],
    )
    .await
    .expect(422);
    let text = r.text();
    assert_eq!(value_of(&text, "registry-address"), "r.example");
    assert_eq!(value_of(&text, "registry-username"), "robot");
    assert_eq!(value_of(&text, "registry-password"), "");

    // The general form: every field as typed (the stored settings unchanged).
    let r = post_form(
        &mut alice,
        &page,
        &page,
        &[
            ("config_file", "ci/typed.yaml"),
            ("timeout", "soon"),
            ("visibility", "internal"),
            ("require_approval", "none"),
            ("allow_deploy", "true"),
            ("cancel_previous_pipeline_events", "tag"),
        ],
    )
    .await
    .expect(400);
    let text = r.text();
    assert_summary(&text, "general", "timeout must be a whole number");
    assert_eq!(value_of(&text, "config_file"), "ci/typed.yaml");
    assert_eq!(value_of(&text, "timeout"), "soon");
    assert!(
        text.contains("<option value=\"internal\" selected>"),
        "{text}"
    );
    assert!(text.contains("<option value=\"none\" selected>"), "{text}");
    assert!(ticked(&text, "allow_deploy", "true"), "{text}");
    assert!(!ticked(&text, "allow_pr", "true"), "{text}");
    assert!(
        ticked(&text, "cancel_previous_pipeline_events", "tag"),
        "{text}"
    );
    let got = http
        .get(&format!("/api/repos/{id}"), Some(&p.alice))
        .await
        .json();
    assert_eq!(got["config_file"], "", "nothing changed: {got}");
    assert_eq!(got["allow_pr"], true, "nothing changed: {got}");
    // A visit after the refusal: the stored values again, no summary.
    let visit = alice.get(&page).await.expect(200).text();
    assert!(!visit.contains("There is a problem"), "{visit}");
    assert_eq!(value_of(&visit, "config_file"), "");

    // A caller the API refuses outright gets the refusal, not the form: bob (no access).
    let mut bob = signed_in(&s, "bob").await;
    let r = bob
        .send(
            "POST",
            &format!("{page}/crons"),
            Some("csrf=x&name=n&schedule=%40daily"),
            &[("content-type", "application/x-www-form-urlencoded")],
        )
        .await;
    assert_eq!(r.status.as_u16(), 403, "{}", r.text());
    assert!(!r.text().contains("id=\"cron-name\""), "{}", r.text());

    // The admin page: a login taken, the e-mail and the role back; an agent without a name.
    let mut root = signed_in(&s, "root").await;
    let r = post_form(
        &mut root,
        "/admin",
        "/admin/users",
        &[
            ("login", "alice"),
            ("email", "typed@example.com"),
            ("admin", "true"),
        ],
    )
    .await;
    assert!(r.status.is_client_error(), "{}", r.status);
    let text = r.text();
    assert_summary(&text, "users", "");
    assert_eq!(value_of(&text, "user-login"), "alice");
    assert_eq!(value_of(&text, "user-email"), "typed@example.com");
    assert!(ticked(&text, "admin", "true"), "{text}");
    let r = post_form(
        &mut root,
        "/admin",
        "/admin/agents",
        &[("name", ""), ("no_schedule", "true")],
    )
    .await
    .expect(422);
    let text = r.text();
    assert_summary(&text, "agents", "");
    assert!(text.contains("id=\"add-agent-error\""), "{text}");
    assert!(ticked(&text, "no_schedule", "true"), "{text}");
}
