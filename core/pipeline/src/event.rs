//! Woodpecker's webhook events: what triggered a pipeline. One list for every place that
//! checks an event name (`when: event:`, secrets limited to events, a repository's
//! `cancel_previous_pipeline_events`, restarts with `?event=`).

/// An event that can start a pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WebhookEvent {
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
    }
}
