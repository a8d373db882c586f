//! A form the API refused for what was typed, shown again with what was typed.
//!
//! When the API refuses a settings or admin form for its content (400, 409, 422: a bad
//! schedule, a name taken, a field missing), the answer is the form's page again, with the
//! API's status, an error summary at the top that links to the form's section, the message
//! beside the form, and every field as it was typed, so nothing is lost (the pattern of
//! accessible form services such as GOV.UK's). Other refusals (401, 403, 404: the caller may
//! not use the form at all) stay error pages.
//!
//! The refusal travels to the page's own handler as a request extension that only
//! [`super::through_api`] sets: the page renders from the store as on any visit, and its
//! templates ask the [`super::Frame`] for a field's typed value, falling back to the stored one
//! (`frame.typed(action, key, name, stored)`). A secret's value and a registry's password are
//! never written back into a page: their inputs stay empty.

use std::borrow::Borrow;
use std::fmt::Display;

use crate::http::StatusCode;

use super::forms::{CSRF_FIELD, Form};

/// What a refused form carried and why it was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The path the form posted to, as its `action` attribute names it.
    pub action: String,
    /// The page's section the form sits in (the summary's link: `#secrets`).
    pub section: String,
    /// The API's message.
    pub message: String,
    /// The fields as posted, less the CSRF token.
    fields: Vec<(String, String)>,
}

impl Refused {
    /// Whether a refusal with `status` re-shows the form: the caller may use the form and
    /// what they typed was refused.
    pub fn reshows(status: StatusCode) -> bool {
        matches!(
            status,
            StatusCode::BAD_REQUEST | StatusCode::CONFLICT | StatusCode::UNPROCESSABLE_ENTITY
        )
    }

    pub fn new(action: &str, section: &str, message: String, form: &Form) -> Refused {
        Refused {
            action: action.to_string(),
            section: section.to_string(),
            message,
            fields: form
                .fields()
                .filter(|(name, _)| *name != CSRF_FIELD)
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
        }
    }

    /// Whether this is the refusal of the form posting to `action` whose `key` is
    /// `field=value` (the hidden field naming one item of a list, each with its own form of
    /// the same action), or `""` for a page's only form of that action.
    pub fn is_for(&self, action: &str, key: &str) -> bool {
        self.action == action
            && match key.split_once('=') {
                Some((field, value)) => self.get(field) == Some(value),
                None => key.is_empty(),
            }
    }

    /// The first typed value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether `name` was sent with `value` (a ticked checkbox, a chosen option).
    pub fn has(&self, name: &str, value: &str) -> bool {
        self.fields.iter().any(|(k, v)| k == name && v == value)
    }
}

/// What the templates ask of a page's frame, through its `refused`. The form's `action` and
/// `key` are whatever the template builds them from (`base ~ "/secrets"`); they are only
/// written out when a form was refused, so a page's plain visit pays nothing for them.
impl super::Frame {
    fn refused_for(&self, action: impl Display, key: impl Display) -> Option<&Refused> {
        let refused = self.refused.as_ref()?;
        refused
            .is_for(&action.to_string(), &key.to_string())
            .then_some(refused)
    }

    /// The API's message when the form posting to `action` (`key`: see
    /// [`Refused::is_for`]) was refused, shown beside it.
    pub fn refusal(&self, action: impl Display, key: impl Display) -> Option<&str> {
        self.refused_for(action, key).map(|r| r.message.as_str())
    }

    /// Field `name` of that form as typed, else `stored` (what the page shows on a visit).
    pub fn typed(
        &self,
        action: impl Display,
        key: impl Display,
        name: &str,
        stored: impl Display,
    ) -> String {
        match self.refused_for(action, key) {
            Some(refused) => refused.get(name).unwrap_or("").to_string(),
            None => stored.to_string(),
        }
    }

    /// Whether the checkbox or option `name=value` of that form is ticked: as typed, else
    /// `stored`.
    pub fn ticked(
        &self,
        action: impl Display,
        key: impl Display,
        name: &str,
        value: impl Display,
        stored: impl Borrow<bool>,
    ) -> bool {
        match self.refused_for(action, key) {
            Some(refused) => refused.has(name, &value.to_string()),
            None => *stored.borrow(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{HeaderValue, Method, Request};

    fn form(body: &str) -> Form {
        let mut req = Request::new(Method::POST, "/x");
        req.headers.insert(
            "content-type",
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        req.body = body.to_string().into();
        Form::read(&mut req).unwrap()
    }

    #[test]
    fn a_refusal_keeps_what_was_typed_but_the_csrf_token() {
        let refused = Refused::new(
            "/repos/1/settings/crons",
            "crons",
            "bad schedule".into(),
            &form("csrf=t0k&name=nightly&schedule=%40often&events=push&events=tag"),
        );
        assert_eq!(refused.get("name"), Some("nightly"));
        assert_eq!(refused.get("schedule"), Some("@often"));
        assert_eq!(refused.get("csrf"), None);
        assert!(refused.has("events", "tag"));
        assert!(!refused.has("events", "cron"));
    }

    #[test]
    fn a_refusal_belongs_to_one_form_of_its_action_and_item() {
        let refused = Refused::new(
            "/admin/secrets/edit",
            "secrets",
            "no".into(),
            &form("name=TOKEN&note=x"),
        );
        assert!(refused.is_for("/admin/secrets/edit", "name=TOKEN"));
        assert!(!refused.is_for("/admin/secrets/edit", "name=OTHER"));
        assert!(!refused.is_for("/admin/secrets", ""));
        let add = Refused::new("/admin/secrets", "secrets", "no".into(), &form("name=A"));
        assert!(add.is_for("/admin/secrets", ""));
    }

    #[test]
    fn only_refusals_of_what_was_typed_show_the_form_again() {
        for status in [400, 409, 422] {
            assert!(Refused::reshows(StatusCode::from_u16(status).unwrap()));
        }
        for status in [401, 403, 404, 413, 500, 503] {
            assert!(!Refused::reshows(StatusCode::from_u16(status).unwrap()));
        }
    }
}
