//! Woodpecker's webhook events: what triggered a pipeline. One list for every place that
//! checks an event name (`when: event:`, secrets limited to events, a repository's
//! `cancel_previous_pipeline_events`, restarts with `?event=`).

/// An event that can start a pipeline; its wire name on the API and in stored records.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum WebhookEvent {
    /// The default only fills records built with struct update; every trigger names its own.
    #[default]
    Push,
    PullRequest,
    PullRequestClosed,
    PullRequestMetadata,
    Tag,
    Release,
    Deployment,
    Cron,
    Manual,
}

impl WebhookEvent {
    pub const ALL: [WebhookEvent; 9] = [
        WebhookEvent::Push,
        WebhookEvent::PullRequest,
        WebhookEvent::PullRequestClosed,
        WebhookEvent::PullRequestMetadata,
        WebhookEvent::Tag,
        WebhookEvent::Release,
        WebhookEvent::Deployment,
        WebhookEvent::Cron,
        WebhookEvent::Manual,
    ];

    /// The wire name, as Woodpecker spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookEvent::Push => "push",
            WebhookEvent::PullRequest => "pull_request",
            WebhookEvent::PullRequestClosed => "pull_request_closed",
            WebhookEvent::PullRequestMetadata => "pull_request_metadata",
            WebhookEvent::Tag => "tag",
            WebhookEvent::Release => "release",
            WebhookEvent::Deployment => "deployment",
            WebhookEvent::Cron => "cron",
            WebhookEvent::Manual => "manual",
        }
    }

    /// The event named `name`, if it is one.
    pub fn parse(name: &str) -> Option<WebhookEvent> {
        WebhookEvent::ALL.into_iter().find(|e| e.as_str() == name)
    }

    /// Whether `name` is an event's wire name.
    pub fn is_known(name: &str) -> bool {
        WebhookEvent::parse(name).is_some()
    }

    /// `pull_request`, `pull_request_closed` or `pull_request_metadata`.
    pub fn is_pull_request(self) -> bool {
        matches!(
            self,
            WebhookEvent::PullRequest
                | WebhookEvent::PullRequestClosed
                | WebhookEvent::PullRequestMetadata
        )
    }

    /// Every wire name, comma-separated (for error messages).
    pub fn names() -> String {
        WebhookEvent::ALL.map(WebhookEvent::as_str).join(", ")
    }
}

impl std::fmt::Display for WebhookEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for e in WebhookEvent::ALL {
            assert_eq!(WebhookEvent::parse(e.as_str()), Some(e));
        }
        assert!(!WebhookEvent::is_known("lunch"));
        assert!(WebhookEvent::names().starts_with("push, pull_request, "));
        for e in WebhookEvent::ALL {
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(
                json,
                format!("\"{}\"", e.as_str()),
                "serde uses the wire name"
            );
            assert_eq!(serde_json::from_str::<WebhookEvent>(&json).unwrap(), e);
            assert_eq!(e.is_pull_request(), e.as_str().starts_with("pull_request"));
        }
    }
}
