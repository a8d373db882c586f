//! The feed's JSON, written by hand from the stored text.
//!
//! A page is mostly record snapshots, and those are stored as JSON text that the store itself
//! wrote with serde (`store::events::append`), so it is valid by construction: copying it
//! into the response is all a snapshot needs, apart from its `id`, which the feed shows as a
//! string (Clever's schemas type every id as a string, and its clients read
//! `data.object.id` as one; the CI API keeps Woodpecker's numeric ids). The id is spliced
//! where its top-level number stands, found by one scan ([`top_level_number`]), without
//! decoding the object. Decoding each snapshot and encoding it again (or even validating it
//! as a `RawValue`, twice) was most of a page's cost.
//!
//! Objects keep the field order serde gave them before: alphabetical (`created`, `data`,
//! `id`, `type`; `data`, `uri`; `data`, `links`; `rel`, `uri`).

use crate::store::events::{StoredEvent, push_id};
use crate::timefmt::push_rfc3339_millis;

/// An event with its snapshots as the stored text.
pub type TextEvent = StoredEvent<String>;

/// A `links` entry.
pub struct Link {
    pub rel: &'static str,
    pub uri: String,
}

/// `{"data":[{"data":<event>,"uri":…},…],"links":[…]}` for a page of events, where each
/// event's `uri` is `<base>/<id>`.
pub fn page(events: &[TextEvent], base: &str, links: &[Link]) -> String {
    let base = base.trim_end_matches('/');
    let size: usize = events
        .iter()
        .map(|e| e.object.len() + e.previous.as_ref().map_or(0, String::len) + 200)
        .sum();
    let mut out = String::with_capacity(size + 64 * links.len() + 32);
    // `"<base>/` as JSON, without its closing quote: each event's uri is it plus the id.
    let mut uri_prefix = String::new();
    push_str(&mut uri_prefix, &format!("{base}/"));
    uri_prefix.pop();
    out.push_str("{\"data\":[");
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"data\":");
        event(&mut out, e);
        out.push_str(",\"uri\":");
        out.push_str(&uri_prefix);
        push_id(&mut out, e.seq);
        out.push_str("\"}");
    }
    out.push_str("],\"links\":[");
    for (i, link) in links.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"rel\":");
        push_str(&mut out, link.rel);
        out.push_str(",\"uri\":");
        push_str(&mut out, &link.uri);
        out.push('}');
    }
    out.push_str("]}");
    out
}

/// `{"data":<event>}` for `GET /events/{id}`.
pub fn one(e: &TextEvent) -> String {
    let mut out = String::with_capacity(e.object.len() + 256);
    out.push_str("{\"data\":");
    event(&mut out, e);
    out.push('}');
    out
}

/// One Clever `Event`: `{"created":…,"data":{"object":…,"previous_attributes":…},"id":…,"type":…}`
/// (`previous_attributes` only for updates).
fn event(out: &mut String, e: &TextEvent) {
    out.push_str("{\"created\":\"");
    push_rfc3339_millis(out, e.created_ms);
    out.push('"');
    out.push_str(",\"data\":{\"object\":");
    push_with_string_id(out, &e.object);
    if let Some(previous) = &e.previous {
        out.push_str(",\"previous_attributes\":");
        out.push_str(previous);
    }
    out.push_str("},\"id\":\"");
    push_id(out, e.seq);
    out.push_str("\",\"type\":\"");
    // Record types and actions are the store's own identifiers (`pipelines`, `updated`).
    out.push_str(&e.record_type);
    out.push('.');
    out.push_str(&e.action);
    out.push_str("\"}");
}

/// `text` (a JSON object) with its top-level numeric `id` in quotes.
fn push_with_string_id(out: &mut String, text: &str) {
    match top_level_number(text, "id") {
        Some(span) => {
            out.push_str(&text[..span.start]);
            out.push('"');
            out.push_str(&text[span.clone()]);
            out.push('"');
            out.push_str(&text[span.end..]);
        }
        None => out.push_str(text),
    }
}

/// `s` as a JSON string.
fn push_str(out: &mut String, s: &str) {
    let plain = s.bytes().all(|c| c >= 0x20 && c != b'"' && c != b'\\');
    if plain {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        // serde_json escapes exactly as the derived rendering did.
        out.push_str(&serde_json::Value::from(s).to_string());
    }
}

/// Where the number stored under `key` in the top level of the JSON object `text` stands,
/// if it is there and is a number. Scans the text once: strings (with escapes) and nested
/// values are skipped, not decoded. Anything that is not a well-formed object gives `None`.
fn top_level_number(text: &str, key: &str) -> Option<std::ops::Range<usize>> {
    let b = text.as_bytes();
    let ws = |mut i: usize| {
        while b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
            i += 1;
        }
        i
    };
    // The end of the string starting at `i` (at its opening quote), past the closing quote.
    let string_end = |mut i: usize| -> Option<usize> {
        i += 1;
        loop {
            match b.get(i)? {
                b'"' => return Some(i + 1),
                b'\\' => i += 2,
                _ => i += 1,
            }
        }
    };
    // The end of the value starting at `i`.
    let value_end = |mut i: usize| -> Option<usize> {
        let mut depth = 0usize;
        loop {
            match b.get(i)? {
                b'"' => i = string_end(i)?,
                b'{' | b'[' => {
                    depth += 1;
                    i += 1;
                }
                b'}' | b']' if depth > 0 => {
                    depth -= 1;
                    i += 1;
                }
                b',' | b'}' | b']' if depth == 0 => return Some(i),
                _ => i += 1,
            }
            if depth == 0 && matches!(b.get(i.wrapping_sub(1)), Some(b'"' | b'}' | b']')) {
                return Some(i);
            }
        }
    };
    let mut i = ws(0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(i + 1);
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let name_end = string_end(i)?;
        let name = &text[i + 1..name_end - 1];
        i = ws(name_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = ws(i + 1);
        let end = value_end(start)?;
        if name == key {
            let number = text[start..end].trim_end();
            let numeric = !number.is_empty()
                && number
                    .bytes()
                    .all(|c| c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'e' | b'E'));
            return numeric.then(|| start..start + number.len());
        }
        i = ws(end);
        match b.get(i)? {
            b',' => i = ws(i + 1),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timefmt::rfc3339_millis;
    use serde_json::{Value, json};

    fn string_id(text: &str) -> String {
        let mut out = String::new();
        push_with_string_id(&mut out, text);
        out
    }

    #[test]
    fn object_ids_become_strings_wherever_the_key_stands() {
        assert_eq!(string_id(r#"{"id":7,"a":1}"#), r#"{"id":"7","a":1}"#);
        assert_eq!(
            string_id(r#"{"a":"x\"}","b":{"id":1},"c":[1,{"id":2}],"id":-12}"#),
            r#"{"a":"x\"}","b":{"id":1},"c":[1,{"id":2}],"id":"-12"}"#
        );
        assert_eq!(
            string_id(r#"{ "name" : "n", "id" : 3 , "z": null }"#),
            r#"{ "name" : "n", "id" : "3" , "z": null }"#
        );
        // Only a numeric top-level id changes.
        for unchanged in [
            r#"{"id":"7"}"#,
            r#"{"id":null,"a":1}"#,
            r#"{"a":{"id":1}}"#,
            r#"{"a":1}"#,
            r#"{}"#,
            r#"[1,2]"#,
            r#"{"ids":1,"b":true}"#,
        ] {
            assert_eq!(string_id(unchanged), unchanged);
        }
        // Every result is still JSON.
        let v: Value = serde_json::from_str(&string_id(r#"{"x":[{"y":"]}"}],"id":5}"#)).unwrap();
        assert_eq!(v["id"], "5");
        assert_eq!(v["x"][0]["y"], "]}");
    }

    fn stored(seq: i64, object: &Value, previous: Option<&Value>) -> TextEvent {
        StoredEvent {
            seq,
            created_ms: 1_700_000_000_123 + seq,
            record_type: "pipelines".into(),
            action: if previous.is_some() {
                "updated"
            } else {
                "created"
            }
            .into(),
            record_id: seq.to_string(),
            object: serde_json::to_string(object).unwrap(),
            previous: previous.map(|p| serde_json::to_string(p).unwrap()),
            org_id: None,
            repo_id: None,
        }
    }

    /// What the feed served when it was rendered through serde: the hand-written page must
    /// be that, byte for byte, for snapshots with escapes, unicode and nesting.
    fn by_serde(events: &[TextEvent], base: &str, links: &[(&str, &str)]) -> String {
        let data: Vec<Value> = events
            .iter()
            .map(|e| {
                let mut object: Value = serde_json::from_str(&e.object).unwrap();
                if let Some(id) = object.get("id").and_then(Value::as_i64) {
                    object["id"] = Value::String(id.to_string());
                }
                let mut inner = json!({ "object": object });
                if let Some(p) = &e.previous {
                    inner["previous_attributes"] = serde_json::from_str(p).unwrap();
                }
                json!({
                    "data": {
                        "created": rfc3339_millis(e.created_ms),
                        "data": inner,
                        "id": e.id(),
                        "type": e.event_type(),
                    },
                    "uri": format!("{base}/{}", e.id()),
                })
            })
            .collect();
        let links: Vec<Value> = links
            .iter()
            .map(|(rel, uri)| json!({ "rel": rel, "uri": uri }))
            .collect();
        json!({ "data": data, "links": links }).to_string()
    }

    #[test]
    fn a_page_is_the_serde_rendering_byte_for_byte() {
        let events = [
            stored(
                1,
                &json!({"id": 1, "name": "a\"b\\c\n\u{1}", "emoji": "🐦"}),
                None,
            ),
            stored(
                2,
                &json!({"author": "zoë", "id": 2, "nested": {"id": 9, "list": [1, {"x": null}]}}),
                Some(&json!({"status": "pending"})),
            ),
            stored(3, &json!({"id": "already-text", "n": -1.5}), None),
        ];
        let links = [
            ("self", "/events?limit=2&a=\"q\""),
            ("next", "/events?starting_after=x"),
        ];
        let ours = page(
            &events,
            "/events/",
            &links.map(|(rel, uri)| Link {
                rel,
                uri: uri.into(),
            }),
        );
        assert_eq!(ours, by_serde(&events, "/events", &links));
        assert_eq!(page(&[], "/", &[]), r#"{"data":[],"links":[]}"#);

        let single: Value = serde_json::from_str(&one(&events[1])).unwrap();
        assert_eq!(single["data"]["data"]["object"]["id"], "2");
        assert_eq!(
            single["data"]["data"]["previous_attributes"]["status"],
            "pending"
        );
        assert_eq!(single["data"]["type"], "pipelines.updated");
    }
}
