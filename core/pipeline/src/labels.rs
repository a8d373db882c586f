//! Which agent may run which workflow: label matching as upstream.
//!
//! A task carries labels (the workflow's `labels:` plus `repo=<full name>` and
//! `org-id=<id>`); an agent carries its own (platform, backend, hostname, `repo=*`, custom
//! labels, and `org-id` — `*` for instance-wide agents). For every task label with a value
//! the agent needs the same key: `*` scores 1, the same value scores 10, anything else
//! rejects. The highest score wins; 0 means "cannot run it".

use std::collections::BTreeMap;

/// The agent's score for a task, `None` when it may not run it.
pub fn score(task: &BTreeMap<String, String>, agent: &BTreeMap<String, String>) -> Option<u32> {
    let mut total = 0;
    for (key, want) in task {
        if want.is_empty() {
            continue;
        }
        match agent.get(key).map(String::as_str) {
            Some("*") => total += 1,
            Some(have) if have == want => total += 10,
            _ => return None,
        }
    }
    // An agent label `!key=value` makes that label mandatory on the task.
    for (key, value) in agent {
        if let Some(required) = key.strip_prefix('!')
            && task.get(required) != Some(value)
        {
            return None;
        }
    }
    Some(total.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn matching() {
        let task = map(&[
            ("repo", "a/b"),
            ("org-id", "3"),
            ("platform", "linux/amd64"),
        ]);
        let global = map(&[("repo", "*"), ("org-id", "*"), ("platform", "linux/amd64")]);
        assert_eq!(score(&task, &global), Some(12));
        let org_agent = map(&[("repo", "*"), ("org-id", "3"), ("platform", "linux/amd64")]);
        assert_eq!(score(&task, &org_agent), Some(21));
        let other_org = map(&[("repo", "*"), ("org-id", "4"), ("platform", "linux/amd64")]);
        assert_eq!(score(&task, &other_org), None);
        let arm = map(&[("repo", "*"), ("org-id", "*"), ("platform", "linux/arm64")]);
        assert_eq!(score(&task, &arm), None);
        let picky = map(&[
            ("repo", "*"),
            ("org-id", "*"),
            ("platform", "linux/amd64"),
            ("!gpu", "yes"),
        ]);
        assert_eq!(score(&task, &picky), None);
        let mut gpu_task = task.clone();
        gpu_task.insert("gpu".into(), "yes".into());
        let mut picky_gpu = picky.clone();
        picky_gpu.insert("gpu".into(), "yes".into());
        assert_eq!(score(&gpu_task, &picky_gpu), Some(22));
    }
}
