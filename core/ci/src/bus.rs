//! Live log lines, fanned out to stream readers (`/api/stream/logs`).
//!
//! Lines are published as they were stored (with their row ids), so a reader that catches up from the database
//! and then follows the bus sees every line. A reader that falls behind by more than the
//! channel's capacity loses its place (`Lagged`) and re-reads from the database.

use std::sync::Arc;

use tokio::sync::broadcast;

use crate::store::logs::LogEntry;

/// Batches kept for slow readers before they have to re-read from the database.
const CAPACITY: usize = 1024;

pub struct LogBus {
    tx: broadcast::Sender<Arc<Vec<LogEntry>>>,
}

impl Default for LogBus {
    fn default() -> Self {
        LogBus {
            tx: broadcast::channel(CAPACITY).0,
        }
    }
}

impl LogBus {
    /// Hands stored lines to every reader (shared, not copied per reader).
    pub fn publish(&self, lines: Arc<Vec<LogEntry>>) {
        if !lines.is_empty() {
            // No receiver is not an error: nobody is watching.
            let _ = self.tx.send(lines);
        }
    }

    /// Whether anyone reads: lines are rendered for the bus only then.
    pub fn has_readers(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Vec<LogEntry>>> {
        self.tx.subscribe()
    }
}
